"""Unit rendering: golden files for every example stack, conflicts, idempotence, systemd-analyze.

Setup cost: none beyond rendering (milliseconds); `systemd-analyze verify` ~0.3 s per unit.
Regenerate the golden files after an intended template change with
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest deploy/tests/test_render.py` and review the diff.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radiance.cli import app
from radiance.deploy import render, unitspec
from radiance.stack import load_stacks
from radiance.testing.tools import require_tool

EXAMPLE = Path(unitspec.__file__).parent / "stacks.example.yaml"
GOLDEN = Path(__file__).parent / "golden"
FIXED_STACKS = "/etc/radiance/stacks.yaml"


@pytest.fixture
def home(monkeypatch, tmp_path):
    monkeypatch.setenv("RADIANCE_HOME", "/var/lib/radiance")
    return tmp_path


def _normalized(path: Path) -> str:
    return path.read_text().replace(str(EXAMPLE.absolute()), FIXED_STACKS)


@pytest.mark.parametrize("kind", ["service", "quadlet"])
def test_golden_units_for_every_example_stack(home, kind):
    """Each podman stack gets one definition: a .service, or a Quadlet .container (never both)."""
    sf = load_stacks(EXAMPLE)
    out = home / "units"
    results = render.render_all(sf, out, launcher_bin="/usr/local/bin/radiance-launch", podman_units=kind,
                                quadlet_dir=out / "quadlet")
    rendered = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    podman_stacks = [n for n, s in sf.stacks.items() if s.runtime == "podman"]
    expected = [Path(f"radiance-{n}.service") for n in sf.stacks if kind == "service" or n not in podman_stacks]
    expected += [Path("quadlet") / f"radiance-{n}.container" for n in podman_stacks if kind == "quadlet"]
    expected += [Path(render.WATCHDOG_TEMPLATE)]  # `demo` is native
    assert rendered == sorted(expected)
    assert all(r.changed for r in results)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        for rel in rendered:
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_text(_normalized(out / rel))
    for rel in rendered:
        assert (GOLDEN / rel).exists(), f"no golden file for {rel}; run with UPDATE_GOLDEN=1 and review"
        assert _normalized(out / rel) == (GOLDEN / rel).read_text(), f"{rel} differs from its golden file"


def test_switching_the_podman_unit_kind_removes_the_other(home):
    sf = load_stacks(EXAMPLE)
    out, quadlets = home / "units", home / "containers-systemd"
    render.render_all(sf, out, podman_units="service", quadlet_dir=quadlets)
    assert (out / "radiance-paro.service").exists()
    res = render.render_all(sf, out, podman_units="quadlet", quadlet_dir=quadlets)
    assert (quadlets / "radiance-paro.container").exists()
    assert not (out / "radiance-paro.service").exists(), "a .service would shadow the Quadlet-generated unit"
    assert {r.path.name for r in res if r.removed} == {f"radiance-{n}.service" for n in ("paro", "paromx", "pq2")}
    assert (out / "radiance-demo.service").exists() and (out / "radiance-turing.service").exists()  # native


def test_conflicts_come_from_shared_gpus_and_ports():
    c = unitspec.conflicts(load_stacks(EXAMPLE))
    assert c["paro"]["paromx"] == ["port 8080", "GPU 0,1"]
    assert c["pq2"]["paro"] == ["GPU 0"]
    assert c["demo"] == {}
    assert "demo" not in c["paro"]


def test_podman_unit_passes_devices_model_and_ports(home):
    sf = load_stacks(EXAMPLE)
    paro = render.render_unit(unitspec.unit_spec(sf, "paro"))
    for arg in ("--device /dev/kfd", "--device /dev/dri", "--group-add video", "--ipc=host",
                "--env HIP_VISIBLE_DEVICES=0,1",  # TP=2: both GPUs
                "--volume /var/lib/radiance/models/Qwen3.8-27B-PARO:/var/lib/radiance/models/Qwen3.8-27B-PARO:ro",
                "--publish 127.0.0.1:8080:8080", "--name qwen_vllm_paro", "--label radiance.stack=paro",
                "Conflicts=radiance-paromx.service radiance-pq2.service radiance-turing.service",
                f"--volume {EXAMPLE.absolute()}:{EXAMPLE.absolute()}:ro",  # identity mount of the stack file
                f"radiance-launch paro --mode prod --stacks {EXAMPLE.absolute()}"):
        assert arg in paro, arg
    pq2 = render.render_unit(unitspec.unit_spec(sf, "pq2"))
    assert "--device nvidia.com/gpu=all" in pq2 and "--env CUDA_VISIBLE_DEVICES=0" in pq2
    assert "/dev/kfd" not in pq2


def test_host_and_start_timeout_follow_the_stack(home, tmp_path):
    text = EXAMPLE.read_text().replace("    port: 8765\n", "    port: 8765\n    host: 0.0.0.0\n    start_timeout_s: 600\n")
    f = tmp_path / "stacks.yaml"
    f.write_text(text)
    spec = unitspec.unit_spec(load_stacks(f), "demo")
    assert spec.host == "0.0.0.0"
    unit = render.render_unit(spec)
    assert "TimeoutStartSec=660" in unit and "--wait 600" in unit  # the probe's window, then a margin
    assert unitspec.probe_url(load_stacks(f).get("demo")) == "http://127.0.0.1:8765"


def test_unit_values_are_escaped_and_quoted():
    assert render.sd_exec("a=b") == "a=b"
    assert render.sd_exec("50%") == "50%%"
    assert render.sd_exec("$HOME") == '"$$HOME"'  # ExecStart expands $VAR
    assert render.sd_value("$HOME") == '"$HOME"'  # Environment= does not (systemd.exec)
    assert render.sd_exec('two words "q"') == '"two words \\"q\\""'
    assert render.sd_value("a\\b c") == '"a\\\\b c"'


@pytest.mark.parametrize("bad", ["a\nExecStartPre=/bin/touch /tmp/x", "tab\there", "nul\x00", "nel\x85", "ls\u2028"])
def test_a_control_character_never_reaches_a_unit(bad):
    for escape in (render.sd_exec, render.sd_value, render.sd_text):
        with pytest.raises(ValueError, match="control character"):
            escape(bad)


def test_second_render_changes_nothing_and_stale_units_go(home):
    sf = load_stacks(EXAMPLE)
    out = home / "units"
    render.render_all(sf, out)
    again = render.render_all(sf, out)
    assert not any(r.changed for r in again)
    (out / "radiance-gone.service").write_text(f"# {render.HEADER_MARK} from x\n")
    (out / "radiance-mine.service").write_text("# hand-written, not ours\n")
    res = render.render_all(sf, out, check=True)
    assert [r.path.name for r in res if r.removed] == ["radiance-gone.service"]
    assert (out / "radiance-gone.service").exists()  # check=True writes nothing
    render.render_all(sf, out)
    assert not (out / "radiance-gone.service").exists() and (out / "radiance-mine.service").exists()


def test_render_cli_reports_bad_stack_file(tmp_path):
    bad = tmp_path / "stacks.yaml"
    bad.write_text("version: 1\nstacks:\n  x:\n    arch: cpu\n    model: m\n    quant: paroquant\n    port: 70000\n")
    r = CliRunner().invoke(app, ["render", "--stacks", str(bad), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert f"{bad}:7: stacks.x.port" in r.output


def test_every_rendered_unit_passes_systemd_analyze_verify(tmp_path, monkeypatch):
    require_tool("systemd-analyze")
    monkeypatch.setenv("RADIANCE_HOME", str(tmp_path / "home"))
    launcher = Path(sys.executable).parent / "radiance-launch"
    assert launcher.exists(), "radiance-launch entry point missing from the venv"
    if shutil.which("podman") is None:
        pytest.skip("podman stacks' units need /usr/bin/podman to exist for verify")
    out = tmp_path / "units"
    render.render_all(load_stacks(EXAMPLE), out, launcher_bin=str(launcher), podman_bin=shutil.which("podman"))
    (out / "radiance-watchdog@demo.service").symlink_to(render.WATCHDOG_TEMPLATE)  # verify checks instances
    for unit in sorted(p for p in out.glob("*.service") if not p.name.endswith("@.service")):
        r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, cwd=out)
        # Unknown keys only warn (exit 0): any stderr line about our unit is a defect.
        assert r.returncode == 0 and unit.name not in r.stderr, f"{unit.name}:\n{r.stderr}"


def test_a_native_unit_refuses_a_launcher_its_private_tmp_hides(home):
    sf = load_stacks(EXAMPLE)
    native = next(n for n, s in sf.stacks.items() if s.runtime == "native")
    with pytest.raises(ValueError, match=r"radiance-launch is at /tmp/x/\.venv/bin/radiance-launch.*PrivateTmp=yes"):
        unitspec.unit_spec(sf, native, launcher_bin="/tmp/x/.venv/bin/radiance-launch")
    assert unitspec.unit_spec(sf, native, launcher_bin="/opt/tmp/radiance-launch").command[0] == "/opt/tmp/radiance-launch"
    r = CliRunner().invoke(app, ["render", "--stacks", str(EXAMPLE), "--out", str(home / "units"),
                                 "--launcher", "/var/tmp/v/bin/radiance-launch"])
    assert r.exit_code == 2 and "PrivateTmp=yes" in r.output and not (home / "units").exists()
