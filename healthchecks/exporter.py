"""Prometheus exporter: per-stack health, switches and launches (`radiance exporter`).

Two sources, neither sharing process state with what it measures:
- probes: a background round every `interval_s` runs `probe.live` and `probe.ready` against each
  stack's port (concurrently) and keeps the last answers; scrapes read those, so a scrape never
  waits on a slow server;
- state files (healthchecks/state.py): read on every scrape, so a launch or a switch shows on the
  next scrape, and counters survive exporter restarts (they are counted from the files).

Every metric name is in the README's "Health and metrics" table (a test compares the two).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from radiance import paths
from radiance.healthchecks import probe, state

log = logging.getLogger("radiance.exporter")

STACK_LABELS = ["stack", "port", "gpus", "model"]
PROBE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A switch stops one server and waits for the next to answer: seconds to tens of minutes.
SWITCH_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)


class ExporterError(RuntimeError):
    """The exporter cannot start; the message says what to change."""


@dataclass(frozen=True)
class Target:
    """One stack as the exporter sees it: where to probe it and the labels it carries."""

    name: str
    url: str
    port: int
    gpus: str  # "0,1"; "none" for a CPU stack
    model: str | None  # the served model name the ready probe asks for; None = whatever it lists

    @property
    def labels(self) -> list[str]:
        return [self.name, str(self.port), self.gpus, self.model or ""]


def targets_from_stacks(stacks_path: Path | None) -> list[Target]:
    """Targets for every stack of the stack file (the launcher's loader; its errors name file and key)."""
    from radiance.deploy.unitspec import probe_url
    from radiance.launcher.stack import default_stacks_path, load_stacks

    sf = load_stacks(stacks_path or default_stacks_path())
    out = []
    for name, st in sf.stacks.items():
        out.append(Target(name=name, url=probe_url(st), port=st.port,
                          gpus=",".join(map(str, st.devices)) or "none", model=st.model_name))
    return out


@dataclass(frozen=True)
class StackHealth:
    up: bool
    ready: bool
    reason: str
    at: float


class Prober:
    """Probes every target each round; keeps the last `StackHealth` per stack for the collector."""

    def __init__(self, targets: list[Target], registry: CollectorRegistry, timeout_s: float) -> None:
        self.targets = targets
        self.timeout_s = timeout_s
        self.last: dict[str, StackHealth] = {}
        self._lock = threading.Lock()
        self.latency = Histogram("radiance_probe_latency_seconds",
                                 "Wall time of one live or ready probe of a stack (ready includes a 1-token completion).",
                                 ["stack", "probe"], buckets=PROBE_BUCKETS, registry=registry)

    def _probe(self, t: Target) -> StackHealth:
        lv = probe.live(t.url, self.timeout_s)
        self.latency.labels(t.name, "live").observe(lv.latency_s)
        if not lv.ok:
            return StackHealth(False, False, lv.reason, time.time())
        rd = probe.ready(t.url, t.model, self.timeout_s)
        self.latency.labels(t.name, "ready").observe(rd.latency_s)
        return StackHealth(True, rd.ok, rd.reason, time.time())

    def round(self) -> None:
        if not self.targets:
            return
        with ThreadPoolExecutor(max_workers=min(len(self.targets), 16)) as pool:
            results = dict(zip([t.name for t in self.targets], pool.map(self._probe, self.targets)))
        with self._lock:
            for name, h in results.items():
                old = self.last.get(name)
                if old is None or (old.up, old.ready) != (h.up, h.ready):
                    log.info("stack %s: %s", name, h.reason)
            self.last = results

    def snapshot(self) -> dict[str, StackHealth]:
        with self._lock:
            return dict(self.last)


def active_stack(switches: Iterable[state.SwitchRecord]) -> str | None:
    """The stack the last switch started and left running: `to` after `ok`, `from` after
    `rolled_back`; none after `timeout` (vllm-switch stops a target that did not get ready, and
    rollback, if any, failed too); a `refused` switch touched nothing, so the one before it decides."""
    for rec in sorted(switches, key=lambda r: r.at, reverse=True):
        if rec.outcome == "ok":
            return rec.to
        if rec.outcome == "rolled_back":
            return rec.from_
        if rec.outcome == "timeout":
            return None
    return None


def _histogram(name: str, doc: str, label: str, groups: dict[str, list[float]], buckets: tuple[float, ...]):
    fam = HistogramMetricFamily(name, doc, labels=[label])
    for value, observations in sorted(groups.items()):
        counts = [(str(b), float(sum(1 for o in observations if o <= b))) for b in buckets]
        counts.append(("+Inf", float(len(observations))))
        fam.add_metric([value], counts, sum_value=float(sum(observations)))
    return fam


class StateCollector(Collector):
    """Per-stack gauges from the prober plus switch and launch metrics from the state files."""

    def __init__(self, targets: list[Target], prober: Prober, state_root: Path | None = None) -> None:
        self.targets = targets
        self.prober = prober
        self.state_root = state_root
        self._reported_bad: dict[str, set[str]] = {}
        self._cache: dict = {}  # parsed state files by (mtime, size); see state.read_records

    def _read(self, kind: str, bad_counts: dict[str, int]) -> dict:
        good, bad = state.read_records(kind, self.state_root, self._cache)
        for f in sorted(set(bad) - self._reported_bad.get(kind, set())):  # once per file, not once per scrape
            log.warning("state file %s ignored: %s", f, bad[f])
        self._reported_bad[kind] = set(bad)
        bad_counts[kind] = len(bad)
        return good

    def collect(self) -> Iterator:
        bad_counts: dict[str, int] = {}
        health = self.prober.snapshot()
        switches = list(self._read("switch", bad_counts).values())
        launches = self._read("launch", bad_counts)
        readies = self._read("ready", bad_counts)
        active = active_stack(switches)

        up = GaugeMetricFamily("radiance_up", "1 when the stack's server answers /health with 200.", labels=STACK_LABELS)
        rd = GaugeMetricFamily("radiance_ready", "1 when the stack lists its model and answers a 1-token completion.",
                               labels=STACK_LABELS)
        act = GaugeMetricFamily("radiance_active", "1 for the stack vllm-switch last started.", labels=STACK_LABELS)
        for t in self.targets:
            h = health.get(t.name)
            if h is not None:  # before the first probe round nothing is known: no sample, not a 0
                up.add_metric(t.labels, float(h.up))
                rd.add_metric(t.labels, float(h.ready))
            act.add_metric(t.labels, float(t.name == active))
        yield from (up, rd, act)

        yield from self._switch_metrics(switches)
        yield from self._launch_metrics(launches, readies)

        errs = GaugeMetricFamily("radiance_state_file_errors",
                                 "State files the exporter could not read or that do not match their schema.",
                                 labels=["kind"])
        for kind in state.SCHEMAS:
            errs.add_metric([kind], float(bad_counts.get(kind, 0)))
        yield errs

    def _switch_metrics(self, switches: list[state.SwitchRecord]) -> Iterator:
        total = CounterMetricFamily("radiance_switches", "vllm-switch runs by target stack and outcome.",
                                    labels=["to", "outcome"])
        counts: dict[tuple[str, str], int] = {(t.name, o): 0 for t in self.targets for o in state.SWITCH_OUTCOMES}
        durations: dict[str, list[float]] = {o: [] for o in state.SWITCH_OUTCOMES}
        for rec in switches:
            counts[(rec.to, rec.outcome)] = counts.get((rec.to, rec.outcome), 0) + 1
            durations[rec.outcome].append(rec.duration_s)
        for (to, outcome), n in sorted(counts.items()):
            total.add_metric([to, outcome], float(n))
        yield total
        yield _histogram("radiance_switch_duration_seconds", "Seconds from a switch request to its outcome.",
                         "outcome", durations, SWITCH_BUCKETS)
        last = GaugeMetricFamily("radiance_last_switch_timestamp_seconds", "Unix time of the latest switch outcome.")
        if switches:
            last.add_metric([], max(r.at for r in switches))
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
