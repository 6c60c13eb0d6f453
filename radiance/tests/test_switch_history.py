"""Switch records stay bounded: the newest KEEP as files, the rest folded into totals that the
exporter adds back, so its counters and histogram never go down (real files, the real collector)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from radiance import state, switch_history
from radiance.healthchecks import exporter


def _metrics(root) -> dict[tuple, float]:
    targets = [exporter.Target("demo", "http://127.0.0.1:9", 9, "none", "demo"),
               exporter.Target("paro", "http://127.0.0.1:9", 9, "0,1", "qwen")]
    registry, _ = exporter.build(targets, state_root=root)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _switches(n: int, root, start: float = 1000.0) -> None:
    for i in range(n):
        to, outcome = ("demo", "ok") if i % 3 else ("paro", "timeout")
        state.record_switch(None, to, outcome, float(i % 40), at=start + i, root=root)


def _switch_series(root) -> dict[tuple, float]:
    return {k: v for k, v in _metrics(root).items() if "switch" in k[0]}


def test_folding_keeps_the_directory_bounded_and_the_metrics_the_same(tmp_path):
    whole, folded = tmp_path / "whole", tmp_path / "folded"
    for root in (whole, folded):
        _switches(700, root)
    assert len(list((folded / "switch").glob("*.json"))) == 700  # what piled up before
    switch_history.record("demo", "paro", "rolled_back", 99.0, at=9000.0, root=folded)  # vllm-switch's write folds
    state.record_switch("demo", "paro", "rolled_back", 99.0, at=9000.0, root=whole)
    assert len(list((folded / "switch").glob("*.json"))) == switch_history.KEEP
    assert _switch_series(folded) == _switch_series(whole)
    assert _switch_series(whole)[("radiance_switches_total", (("outcome", "ok"), ("to", "demo")))] == 466.0


def test_a_fold_killed_before_it_deleted_its_files_counts_nothing_twice(tmp_path):
    _switches(300, tmp_path)
    files = sorted((tmp_path / "switch").glob("*.json"))
    saved = {p: p.read_text() for p in files}
    switch_history.fold(tmp_path)
    for p, text in saved.items():  # as if killed right after writing the totals
        p.write_text(text)
    assert _metrics(tmp_path)[("radiance_switches_total", (("outcome", "ok"), ("to", "demo")))] == 200.0
    switch_history.fold(tmp_path)
    assert len(list((tmp_path / "switch").glob("*.json"))) == switch_history.KEEP
