"""The Grafana dashboard's shape and the metric names it uses (checked against a real scrape in
test_integration.py)."""

from __future__ import annotations

import re
from pathlib import Path

from radiance.healthchecks import dashboard

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_metric_names_from_promql():
    e = ('sum by (position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=~"$model_name"}'
         '[$__rate_interval])) / ignoring(position) group_left() sum(rate(vllm:spec_decode_num_drafts_total[5m]))')
    assert dashboard.metric_names(e) == {"vllm:spec_decode_num_accepted_tokens_per_pos_total",
                                         "vllm:spec_decode_num_drafts_total"}
    assert dashboard.metric_names("time() - radiance_last_switch_timestamp_seconds") == {
        "radiance_last_switch_timestamp_seconds"}
    assert dashboard.metric_names('histogram_quantile(0.95, sum by (le, stack) (rate(x_bucket{a="b or c"}[1m])))') == {
        "x_bucket"}
    assert dashboard.metric_names("label_values(radiance_up, stack)") == {"radiance_up"}
    assert dashboard.metric_names("1 + a offset 5m and on(job) b") == {"a", "b"}


def test_runnable_replaces_grafana_variables():
    assert dashboard.runnable('rate(x{m=~"$model_name"}[$__rate_interval])') == 'rate(x{m=~".*"}[1m])'
    assert dashboard.runnable("label_values(radiance_up, stack)") == "radiance_up"


def test_dashboard_is_well_formed():
    d = dashboard.load()
    assert d["title"] and d["uid"]
    panels = [p for p in d["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels:
        assert p["targets"], f"panel {p['title']!r} has no query"
        assert p["datasource"]["uid"] == "${datasource}", f"panel {p['title']!r} must use the $datasource variable"
        assert set(p["gridPos"]) == {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
    exprs = [e for _, e in dashboard.expressions(d)]
    for e in exprs:  # balanced brackets: a typo here shows as a panel error in Grafana
        for o, c in ("()", "{}", "[]"):
            assert e.count(o) == e.count(c), e


def test_dashboard_has_the_panels_that_matter():
    names = set().union(*(dashboard.metric_names(e) for _, e in dashboard.expressions(dashboard.load())))
    # vLLM: tokens/s, TTFT, inter-token latency, KV usage (the renamed metric), spec-decode acceptance
    for m in ["vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
              "vllm:inter_token_latency_seconds_bucket", "vllm:kv_cache_usage_perc",
              "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"]:
        assert m in names, m
    assert "vllm:gpu_cache_usage_perc" not in names, "renamed to vllm:kv_cache_usage_perc"
    # radiance: every metric of the docs' table has a panel (histograms through their buckets)
    documented = set(re.findall(r"^\|\s*`(radiance_[a-z0-9_]+)`\s*\|", DOC.read_text(), re.M))
    assert documented, f"no metric table in {DOC}"
    used = {re.sub(r"_bucket$", "", n) for n in names}
    assert documented - used == set(), "radiance metrics without a panel"
