"""Read-only views for vllm-switch: the dry-run plan, `status` and `list` (all read live)."""

from __future__ import annotations

from radiance import apikey
from radiance.deploy import hoststate, inflight, precheck
from radiance.deploy.unitspec import probe_url, unit_name
from radiance import probe
from radiance.stack import StackFile


def describe_switch(sf: StackFile, target: str, *, wait: bool, rollback: bool, force: bool = False,
                    drain_timeout: float = inflight.DRAIN_TIMEOUT_S) -> str:
    views = hoststate.views(sf)
    clashing = [n for n in hoststate.conflicting(sf, target) if views[n].running]
    port = sf.get(target).port
    lines = [f"dry run: switch to {target} ({unit_name(target)}), nothing will be changed"]
    why = precheck.refusal(sf, target, views, lambda n: apikey.stack_key(sf, n))
    if why:
        lines.append(f"  would REFUSE: {why}")
        return "\n".join(lines)
    strangers = hoststate.strangers_on_port(sf, port)
    if strangers:
        who = ", ".join(h.describe() for h in strangers)
        lines.append(f"  would REFUSE: port {port} is held by {who}, which is not a radiance stack")
        return "\n".join(lines)
    if views[target].running and not clashing:
        lines.append(f"  {unit_name(target)} is already {views[target].state.active}: only wait for readiness")
        return "\n".join(lines)
    for n, load in inflight.loads(sf, clashing).items():
        now = load if isinstance(load, str) else load.describe()
        lines.append(f"  {'stop at once (--force)' if force else 'wait for the requests of'} {unit_name(n)} "
                     f"(now: {now}){'' if force else f', at most {drain_timeout:g} s'}")
        lines.append(f"  stop {unit_name(n)} (shares {', '.join(hoststate.conflicts_of(sf, target, n))})")
    lines.append(f"  wait until {'their containers are gone, ' if clashing else ''}port {port} is free"
                 f"{' and GPU ' + ','.join(map(str, views[target].gpus)) + ' memory is released' if views[target].gpus else ''}")
    lines.append(f"  start {unit_name(target)}")
    if wait:
        lines.append(f"  wait for a 1-token completion at {probe_url(sf.get(target))}")
        if clashing and rollback:
            lines.append(f"  on timeout/failure: show its journal, stop it, start {', '.join(clashing)} again")
    return "\n".join(lines)


def _row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(_row(r, widths) for r in [header, *rows])


def list_table(sf: StackFile) -> str:
    rows = []
    for name, v in hoststate.views(sf).items():
        s = sf.get(name)
        rows.append([name, s.runtime, str(s.port), ",".join(map(str, s.devices)) or "-",
                     ",".join(hoststate.conflicting(sf, name)) or "-", v.state.active or "?",
                     s.description or ""])
    return _table(["STACK", "RUNTIME", "PORT", "GPUS", "CONFLICTS", "UNIT", "DESCRIPTION"], rows)


def status_table(sf: StackFile, probe_timeout: float) -> str:
    running = [v for v in hoststate.views(sf).values() if v.running]
    if not running:
        return "no radiance stack is active"
    rows = []
    for v in running:
        try:
            key = apikey.stack_key(sf, v.name)
        except apikey.ApiKeyError as e:
            rows.append([v.name, v.state.active, v.state.since or "-", "?", str(v.port),
                         ",".join(map(str, v.gpus)) or "-", f"not probed: {e}"])
            continue
        r = probe.healthy(probe_url(sf.get(v.name)), sf.get(v.name).model_name, timeout=probe_timeout, api_key=key)
        rows.append([v.name, v.state.active, v.state.since or "-", "yes" if r.ok else "no", str(v.port),
                     ",".join(map(str, v.gpus)) or "-", r.reason])
    return _table(["ACTIVE", "UNIT", "SINCE", "HEALTHY", "PORT", "GPUS", "PROBE"], rows)
