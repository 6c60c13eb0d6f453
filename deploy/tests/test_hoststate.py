"""Who owns a port/GPU holder: a stack's unit, a stack's container, or a stranger (milliseconds)."""

from __future__ import annotations

from pathlib import Path

from radiance.deploy import hoststate, unitspec
from radiance.deploy.procs import Holder
from radiance.stack import load_stacks

EXAMPLE = Path(unitspec.__file__).parent / "stacks.example.yaml"


def test_owner_by_unit_cgroup_container_cgroup_or_none():
    sf = load_stacks(EXAMPLE)
    native = Holder(10, "python3", "/system.slice/radiance-demo.service")
    assert hoststate.owner(sf, native, {}) == "demo"
    cid = "ab" * 32
    in_container = Holder(11, "python3", f"/machine.slice/libpod-{cid}.scope/container")
    assert hoststate.owner(sf, in_container, {cid: "qwen_vllm_paro"}) == "paro"
    assert hoststate.owner(sf, in_container, {cid: "someone-elses"}) is None
    assert hoststate.owner(sf, Holder(12, "nginx", "/system.slice/nginx.service"), {}) is None


def test_conflicts_of_names_what_is_shared():
    sf = load_stacks(EXAMPLE)
    assert hoststate.conflicts_of(sf, "paro", "paromx") == ["port 8080", "GPU 0,1"]
    assert hoststate.conflicts_of(sf, "paro", "demo") == []
