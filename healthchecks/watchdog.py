"""The native stacks' watchdog (`radiance probe watch`, run by `radiance-watchdog@<stack>.service`).

A podman stack has podman's health check with `--health-on-failure=kill`; a native stack has no
container runtime to do that, so this loop does the same thing from beside it: while the stack's
unit is `active` (started and ready: the unit's ExecStartPost waited for the ready probe) it runs
the health probe (radiance.probe.healthy: live and making progress) every `interval_s`; after
`retries` failures in a row it SIGKILLs the unit's main process, and `Restart=on-failure` restarts
the stack. A server busy with long generations is healthy while it generates. A hung server (a deadlocked engine, a process
stopped with SIGSTOP) does not answer SIGTERM, hence SIGKILL. While the unit is starting, stopping
or restarting nothing is counted: the start has its own window (TimeoutStartSec).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from radiance import probe


def _say(msg: str) -> None:
    print(msg, flush=True)  # the journal, at once (a pipe would buffer it)


@dataclass
class Watchdog:
    unit: str
    url: str
    model: str | None
    api_key: str | None
    interval_s: float
    timeout_s: float
    retries: int
    say: Callable[[str], None] = _say
    streak: int = field(default=0, init=False)

    @classmethod
    def for_stack(cls, stacks: Path | None, name: str, *, interval_s: float, timeout_s: float,
                  retries: int) -> Watchdog:
        from radiance import apikey
        from radiance.deploy.unitspec import probe_url, unit_name
        from radiance.stack import load_stacks

        sf = load_stacks(stacks)
        st = sf.get(name)
        return cls(unit=unit_name(name), url=probe_url(st), model=st.model_name, api_key=apikey.stack_key(sf, name),
                   interval_s=interval_s, timeout_s=timeout_s, retries=retries)

    def step(self) -> bool:
        """One round; True when it killed the stack."""
        from radiance.deploy import systemd

        st = systemd.state(self.unit)
        if st.active != "active":
            self.streak = 0  # starting, stopping or restarting: not a steady-state failure
            return False
        r = probe.healthy(self.url, self.model, timeout=self.timeout_s, api_key=self.api_key)
        if r.ok:
            if self.streak:
                self.say(f"{self.unit} answers again after {self.streak} failed probe(s): {r.reason}")
            self.streak = 0
            return False
        self.streak += 1
        self.say(f"{self.unit}: health probe failed ({self.streak}/{self.retries}): {r.reason}")
        if self.streak < self.retries:
            return False
        self.say(f"{self.unit} failed {self.retries} health probes in a row: SIGKILL to its main process, "
                 f"so that systemd restarts it (Restart=on-failure)")
        systemd.kill_main(self.unit, "SIGKILL")
        self.streak = 0
        return True

    def run(self) -> None:
        self.say(f"watching {self.unit} at {self.url}: a health probe every {self.interval_s:g}s, "
                 f"{self.retries} failures in a row restart it")
        while True:
            t0 = time.monotonic()
            self.step()
            time.sleep(max(self.interval_s - (time.monotonic() - t0), 0.0))
