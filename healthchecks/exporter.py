"""Prometheus exporter: per-stack health, switches and launches (`radiance exporter`).

Three sources, none sharing process state with what it measures:
- systemd: each stack's unit ActiveState, read every round (`radiance_active`). Only stacks whose
  unit runs are probed, so of two stacks sharing a port only the one that holds it reports up; the
  others are 0 without a probe. Without systemd as PID 1 (a laptop, CI) every stack is probed and
  `radiance_active` is not exported: there is nothing to read it from.
- probes: a background round every `interval_s` runs `probe.live` and `probe.ready` against each
  probed stack's port (concurrently, with its API key) and keeps the last answers; scrapes read
  those, so a scrape never waits on a slow server;
- state files (radiance/state.py): read on every scrape, so a launch or a switch shows on the
  next scrape, and counters survive exporter restarts (they are counted from the files). A file
  this user cannot read, or one off its schema, is counted and logged, never fatal.

Descriptive labels (unit, runtime, arch, quant, model, port, gpus, image) sit on one series per
stack, `radiance_stack_info`; the health gauges carry `stack` only (join on it in PromQL).
Every metric name is in docs/observability.md's table (a test compares the two).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from radiance import paths
from radiance import probe
from radiance import state
from radiance import switch_history

log = logging.getLogger("radiance.exporter")

PROBE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# ActiveStates in which a unit holds (or is taking) its port: its stack is the one to probe.
HOLDING = ("active", "activating", "deactivating", "reloading")


class ExporterError(RuntimeError):
    """The exporter cannot start; the message says what to change."""


@dataclass(frozen=True)
class Target:
    """One stack as the exporter sees it: where to probe it and what describes it."""

    name: str
    url: str
    port: int
    gpus: str  # "0,1"; "none" for a CPU stack
    model: str | None  # the served model name the ready probe asks for; None = whatever it lists
    unit: str = ""
    runtime: str = ""
    arch: str = ""
    quant: str = ""
    image: str = ""
    api_key: str | None = field(default=None, repr=False)
    key_error: str = ""  # why the stack's api_key_file could not be read (its ready probe says so)

    @property
    def info(self) -> dict[str, str]:
        return {"stack": self.name, "unit": self.unit, "runtime": self.runtime, "arch": self.arch,
                "quant": self.quant, "model": self.model or "", "port": str(self.port), "gpus": self.gpus,
                "image": self.image}


def targets_from_stacks(stacks_path: Path | None) -> list[Target]:
    """Targets for every stack of the stack file (the launcher's loader; its errors name file and key)."""
    from radiance import apikey
    from radiance.deploy.unitspec import probe_url, unit_name
    from radiance.stack import default_stacks_path, load_stacks

    sf = load_stacks(stacks_path or default_stacks_path())
    out = []
    for name, st in sf.stacks.items():
        key, err = None, ""
        try:
            key = apikey.stack_key(sf, name)
        except apikey.ApiKeyError as e:
            err = str(e)
            log.warning("stack %s: %s; its ready probe will fail until the exporter can read it", name, err)
        out.append(Target(name=name, url=probe_url(st), port=st.port, gpus=",".join(map(str, st.devices)) or "none",
                          model=st.model_name, unit=unit_name(name), runtime=st.runtime, arch=st.arch,
                          quant=st.quant, image=st.image or "", api_key=key, key_error=err))
    return out


def systemd_states(targets: list[Target]) -> dict[str, str] | None:
    """{stack: its unit's ActiveState}, or None when systemd is not PID 1 here (or does not answer)."""
    from radiance.deploy import systemd
    from radiance.hostcmd import HostCommandError

    if systemd.available() is not None:
        return None
    try:
        return {t.name: systemd.state(t.unit).active for t in targets if t.unit}
    except HostCommandError as e:
        log.warning("systemd did not answer (%s); probing every stack this round", e)
        return None


@dataclass(frozen=True)
class StackHealth:
    up: bool
    ready: bool
    reason: str
    at: float


class Prober:
    """Each round: the units' ActiveState from systemd, then probes of the stacks whose unit runs
    (every stack without systemd); keeps the last `StackHealth` per stack for the collector."""

    def __init__(self, targets: list[Target], registry: CollectorRegistry, timeout_s: float,
                 units: Callable[[list[Target]], dict[str, str] | None] = systemd_states) -> None:
        self.targets = targets
        self.timeout_s = timeout_s
        self.units = units
        self.last: dict[str, StackHealth] = {}
        self.active: dict[str, str] | None = None  # ActiveState per stack; None = systemd unavailable
        self._lock = threading.Lock()
        self._said_no_systemd = False
        self.latency = Histogram("radiance_probe_latency_seconds",
                                 "Wall time of one live or ready probe of a stack (ready includes a 1-token completion).",
                                 ["stack", "probe"], buckets=PROBE_BUCKETS, registry=registry)

    def _probe(self, t: Target) -> StackHealth:
        lv = probe.live(t.url, self.timeout_s, api_key=t.api_key)
        self.latency.labels(t.name, "live").observe(lv.latency_s)
        if not lv.ok:
            return StackHealth(False, False, lv.reason, time.time())
        if t.key_error:
            return StackHealth(True, False, f"not probed for readiness: {t.key_error}", time.time())
        rd = probe.ready(t.url, t.model, self.timeout_s, api_key=t.api_key)
        self.latency.labels(t.name, "ready").observe(rd.latency_s)
        return StackHealth(True, rd.ok, rd.reason, time.time())

    def round(self) -> None:
        if not self.targets:
            return
        active = self.units(self.targets)
        if active is None and not self._said_no_systemd:
            log.info("systemd is not PID 1 here: every stack is probed and radiance_active is not exported")
            self._said_no_systemd = True
        probed = [t for t in self.targets if active is None or active.get(t.name) in HOLDING]
        results = {t.name: StackHealth(False, False, f"not probed: {t.unit} is {active.get(t.name) or 'unknown'}",
                                       time.time()) for t in self.targets if t not in probed}
        if probed:
            with ThreadPoolExecutor(max_workers=min(len(probed), 16)) as pool:
                results.update(zip([t.name for t in probed], pool.map(self._probe, probed)))
        with self._lock:
            for name, h in results.items():
                old = self.last.get(name)
                if old is None or (old.up, old.ready) != (h.up, h.ready):
                    log.info("stack %s: %s", name, h.reason)
            self.last, self.active = results, active

    def snapshot(self) -> tuple[dict[str, StackHealth], dict[str, str] | None]:
        with self._lock:
            return dict(self.last), (dict(self.active) if self.active is not None else None)


def _histogram(name: str, doc: str, label: str, groups: dict[str, list[float]], buckets: tuple[float, ...],
               folded: state.SwitchTotals | None = None):
    """A histogram of `groups` (label value -> observations) plus what `folded` counted already
    (switch records folded into totals: per-bucket counts and sums)."""
    fam = HistogramMetricFamily(name, doc, labels=[label])
    for value, observations in sorted(groups.items()):
        base = (folded.buckets.get(value) if folded else None) or [0] * (len(buckets) + 1)
        cumulative = [sum(base[:i + 1]) for i in range(len(base))]
        counts = [(str(b), float(cumulative[i] + sum(1 for o in observations if o <= b))) for i, b in enumerate(buckets)]
        counts.append(("+Inf", float(cumulative[-1] + len(observations))))
        base_sum = folded.duration_sum.get(value, 0.0) if folded else 0.0
        fam.add_metric([value], counts, sum_value=base_sum + float(sum(observations)))
    return fam


class StateCollector(Collector):
    """Per-stack gauges from the prober plus switch and launch metrics from the state files."""

    def __init__(self, targets: list[Target], prober: Prober, state_root: Path | None = None) -> None:
        self.targets = targets
        self.prober = prober
        self.state_root = state_root
        self._reported_bad: dict[str, set[str]] = {}
        self._cache: dict = {}  # parsed state files by (mtime, size); see state.read_records
        # prometheus_client serves scrapes on threads: the cache and the reported-bad sets are shared
        self._files = threading.Lock()

    def _read(self, kind: str, bad_counts: dict[str, int]) -> dict:
        good, bad = state.read_records(kind, self.state_root, self._cache)
        for f in sorted(set(bad) - self._reported_bad.get(kind, set())):  # once per file, not once per scrape
            log.warning("state file %s ignored: %s", f, bad[f])
        self._reported_bad[kind] = set(bad)
        bad_counts[kind] = len(bad)
        return good

    def collect(self) -> Iterator:
        bad_counts: dict[str, int] = {}
        health, active = self.prober.snapshot()
        with self._files:
            totals = self._read("switch_totals", bad_counts).get(switch_history.NAME)
            switches = switch_history.unfolded(self._read("switch", bad_counts), totals)
            launches = self._read("launch", bad_counts)
            readies = self._read("ready", bad_counts)

        info = InfoMetricFamily("radiance_stack", "One series per stack of the stack file carrying what describes "
                                "it; join on `stack`.", labels=["stack"])
        up = GaugeMetricFamily("radiance_up", "1 when the stack's server answers /health with 200.", labels=["stack"])
        rd = GaugeMetricFamily("radiance_ready", "1 when the stack lists its model and answers a 1-token completion.",
                               labels=["stack"])
        act = GaugeMetricFamily("radiance_active", "1 when systemd reports the stack's unit active (started and ready).",
                                labels=["stack"])
        for t in self.targets:
            info.add_metric([t.name], {k: v for k, v in t.info.items() if k != "stack"})
            h = health.get(t.name)
            if h is not None:  # before the first probe round nothing is known: no sample, not a 0
                up.add_metric([t.name], float(h.up))
                rd.add_metric([t.name], float(h.ready))
            if active is not None:
                act.add_metric([t.name], float(active.get(t.name) == "active"))
        yield from (info, up, rd, act)

        yield from self._switch_metrics(switches, totals)
        yield from self._launch_metrics(launches, readies)

        errs = GaugeMetricFamily("radiance_state_file_errors",
                                 "State files the exporter could not read or that do not match their schema.",
                                 labels=["kind"])
        for kind in state.SCHEMAS:
            errs.add_metric([kind], float(bad_counts.get(kind, 0)))
        yield errs

    def _switch_metrics(self, switches: list[state.SwitchRecord], folded: state.SwitchTotals | None) -> Iterator:
        total = CounterMetricFamily("radiance_switches", "vllm-switch runs by target stack and outcome.",
                                    labels=["to", "outcome"])
        counts: dict[tuple[str, str], int] = {(t.name, o): 0 for t in self.targets for o in state.SWITCH_OUTCOMES}
        for to, by_outcome in (folded.counts if folded else {}).items():
            for outcome, n in by_outcome.items():
                counts[(to, outcome)] = counts.get((to, outcome), 0) + n
        durations: dict[str, list[float]] = {o: [] for o in state.SWITCH_OUTCOMES}
        for rec in switches:
            counts[(rec.to, rec.outcome)] = counts.get((rec.to, rec.outcome), 0) + 1
            durations[rec.outcome].append(rec.duration_s)
        for (to, outcome), n in sorted(counts.items()):
            total.add_metric([to, outcome], float(n))
        yield total
        yield _histogram("radiance_switch_duration_seconds", "Seconds from a switch request to its outcome.",
                         "outcome", durations, state.SWITCH_BUCKETS, folded)
        last = GaugeMetricFamily("radiance_last_switch_timestamp_seconds", "Unix time of the latest switch outcome.")
        times = [r.at for r in switches] + ([folded.last_at] if folded and folded.last_at else [])
        if times:
            last.add_metric([], max(times))
        yield last

    def _launch_metrics(self, launches: dict[str, state.LaunchRecord], readies: dict[str, state.ReadyRecord]) -> Iterator:
        phases = GaugeMetricFamily("radiance_launch_phase_seconds",
                                   "Seconds each phase of the stack's latest launch took (exec_to_ready: exec of "
                                   "vLLM until the ready probe first passed).", labels=["stack", "phase"])
        builds = GaugeMetricFamily("radiance_launch_kernel_builds", "Kernels compiled by the stack's latest launch.",
                                   labels=["stack"])
        hits = GaugeMetricFamily("radiance_launch_kernel_cache_hits",
                                 "Kernels the stack's latest launch took from the kernel cache.", labels=["stack"])
        info = InfoMetricFamily("radiance_launch", "The stack's latest launch: mode, model, compile-cache key, versions.",
                                labels=["stack"])
        when = GaugeMetricFamily("radiance_launch_timestamp_seconds", "Unix time of the stack's latest launch record.",
                                 labels=["stack"])
        for name, rec in sorted(launches.items()):
            for phase, seconds in sorted(rec.phases.items()):
                phases.add_metric([name, phase], seconds)
            ready = readies.get(name)
            if rec.exec_at is not None and ready is not None and ready.at >= rec.exec_at and "exec_to_ready" not in rec.phases:
                phases.add_metric([name, "exec_to_ready"], ready.at - rec.exec_at)
            builds.add_metric([name], float(rec.kernel_builds))
            hits.add_metric([name], float(rec.kernel_cache_hits))
            info.add_metric([name], {"mode": rec.mode, "model": rec.model, "cache_key": rec.cache_key,
                                     "radiance_version": rec.radiance_version, "vllm_version": rec.vllm_version})
            when.add_metric([name], rec.written_at or rec.exec_at or 0.0)
        yield from (phases, builds, hits, info, when)


def build(targets: list[Target], probe_timeout_s: float = 10.0,
          state_root: Path | None = None) -> tuple[CollectorRegistry, Prober]:
    """A registry with every radiance metric (its own, not the process-global one) and its prober."""
    registry = CollectorRegistry()
    prober = Prober(targets, registry, probe_timeout_s)
    registry.register(StateCollector(targets, prober, state_root))
    return registry, prober


def serve(host: str, port: int, stacks_path: Path | None, interval_s: float, probe_timeout_s: float) -> None:
    """Run until SIGTERM/SIGINT: /metrics on host:port, a probe round every interval_s."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    disable_created_metrics()  # `_created` series double the output and no panel reads them
    targets = targets_from_stacks(stacks_path)
    registry, prober = build(targets, probe_timeout_s)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise ExporterError(f"cannot listen on {host}:{port}: {e.strerror or e}; "
                            f"stop what holds it or give another --port") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("serving http://%s:%d/metrics for %d stacks (%s); state files under %s", host, port, len(targets),
             ", ".join(t.name for t in targets), paths.state_dir())
    try:
        while not stop.is_set():
            prober.round()
            stop.wait(interval_s)
    finally:
        server.shutdown()
        server.server_close()
