"""The bundled Grafana dashboard: where it is, its PromQL expressions, and the metrics they name.

Used by the tests that hold the dashboard to a real scrape (a panel naming a metric nobody exports
shows "No data" forever, the usual way dashboards rot after a rename such as vLLM's
`gpu_cache_usage_perc` -> `kv_cache_usage_perc`).
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

# Grafana's variables, replaced by what Grafana would send so the expression can run on Prometheus.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                   "group_left", "group_right", "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")


def path() -> Path:
    return Path(str(resources.files("radiance.healthchecks") / "grafana" / "radiance.json"))


def load(p: Path | None = None) -> dict[str, Any]:
    return json.loads((p or path()).read_text())


def _panels(panels: list[dict]) -> list[dict]:
    out = []
    for p in panels:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))  # panels folded into a collapsed row
    return out


def expressions(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    out = []
    for p in _panels(dash.get("panels", [])):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((f"panel {p.get('title')!r} target {t.get('refId')}", t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query")
            out.append((f"variable ${v['name']}", q))
    return out


def runnable(expr: str) -> str:
    """The expression as Grafana sends it: variables replaced (`$var` in a regex matcher -> `.*`)."""
    m = re.match(r"^label_values\((.+),\s*(\w+)\)$", expr.strip())
    if m:  # Grafana's label_values(metric, label) asks /api/v1/series; the metric selector is the query
        expr = m.group(1)
    for k, v in GRAFANA_VARS.items():
        expr = expr.replace(k, v)
    return re.sub(r"\$\w+", ".*", expr)


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels and strings left out)."""
    e = _STRING.sub('""', runnable(expr))
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = _GROUPING.sub(" ", e)
    return {n for n in _IDENT.findall(e) if n.lower() not in PROMQL_KEYWORDS}
