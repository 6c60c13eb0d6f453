"""The vllm-switch state machine: stop what conflicts, wait until it is really gone, start, wait ready.

    LOCKED -> PLANNED -> (REFUSED | WAITING_REQUESTS -> STOPPING) -> DRAINING -> STARTING -> WAITING_READY
           -> READY           \\ (requests outlast --drain-timeout) -> REFUSED
                              \\ (timeout / unit failed) -> FAILED -> ROLLING_BACK -> ROLLED_BACK | FAILED

Before anything is stopped, everything that can be checked about the target is (precheck.py: unit,
home, key, GPU driver, launch plan, image and its vLLM), and the conflicting stacks' running requests
are waited for, up to --drain-timeout (inflight.py; --force skips it). Every wait says what it waits
for at least every few seconds.

Held under a file lock (filelock: the kernel drops it when the holder dies, even on kill -9). State
is read from systemd/podman//proc and the GPU driver at every step (hoststate.py); the switch
record written at the end (`record_switch`) is only for metrics and never read back. Every
podman/systemctl call has a deadline (hostcmd.py): a hung tool ends the switch as FAILED with the
command named, and the lock is released.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from filelock import FileLock, Timeout

from radiance import apikey, atomic, paths
from radiance import hostcmd
from radiance.deploy import boot, hoststate, inflight, precheck, systemd
from radiance.deploy.unitspec import probe_url, start_timeout_s, stop_timeout_s, unit_name
from radiance import probe
from radiance import switch_history
from radiance.state import record_ready
from radiance.stack import StackFile

RELEASE_TIMEOUT_S = 180.0  # after a stop: container gone, port free, GPU memory released
POLL_S = 0.5
PROGRESS_EVERY_S = 15.0  # a long wait (readiness, a stop) says what it waits for this often


class Phase(Enum):
    LOCKED = "locked"
    PLANNED = "planned"
    REFUSED = "refused"
    WAITING_REQUESTS = "waiting_requests"
    STOPPING = "stopping"
    DRAINING = "draining"
    STARTING = "starting"
    WAITING_READY = "waiting_ready"
    READY = "ready"
    FAILED = "failed"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"


_NEXT: dict[Phase, set[Phase]] = {
    Phase.LOCKED: {Phase.PLANNED},
    # FAILED is reachable from every working phase: a host command that fails or hangs ends the switch.
    Phase.PLANNED: {Phase.REFUSED, Phase.WAITING_REQUESTS, Phase.STOPPING, Phase.DRAINING, Phase.WAITING_READY,
                    Phase.READY, Phase.FAILED},
    Phase.WAITING_REQUESTS: {Phase.REFUSED, Phase.STOPPING, Phase.FAILED},
    Phase.STOPPING: {Phase.DRAINING, Phase.FAILED},
    Phase.DRAINING: {Phase.STARTING, Phase.FAILED, Phase.READY},
    Phase.STARTING: {Phase.WAITING_READY, Phase.READY, Phase.FAILED},
    Phase.WAITING_READY: {Phase.READY, Phase.FAILED},
    Phase.FAILED: {Phase.ROLLING_BACK},
    Phase.ROLLING_BACK: {Phase.ROLLED_BACK, Phase.FAILED},
    Phase.READY: set(), Phase.REFUSED: set(), Phase.ROLLED_BACK: set(),
}


class SwitchBusy(RuntimeError):
    """Another vllm-switch holds the lock."""


class StillBusy(RuntimeError):
    """The stacks to stop still serve requests after the drain timeout (nothing was stopped)."""


@dataclass
class Outcome:
    outcome: str  # ok / timeout / rolled_back / refused (the switch record's vocabulary)
    message: str
    phases: list[Phase] = field(default_factory=list)
    journal: str = ""

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "refused": 4}.get(self.outcome, 1)


def lock_path():
    return paths.state_dir() / "vllm-switch.lock"


class Switch:
    def __init__(self, sf: StackFile, *, timeout: float | None = None, wait: bool = True, rollback: bool = True,
                 lock_wait: float = 0.0, echo: Callable[[str], None] = print, force: bool = False,
                 drain_timeout: float = inflight.DRAIN_TIMEOUT_S) -> None:
        self.sf, self.timeout, self.wait, self.rollback = sf, timeout, wait, rollback
        self.lock_wait, self._echo, self.force, self.drain_timeout = lock_wait, echo, force, drain_timeout
        self.phases: list[Phase] = []
        self.t0 = time.monotonic()
        self._keys: dict[str, str | None] = {}

    # -- bookkeeping ---------------------------------------------------------------------------
    def say(self, msg: str) -> None:
        self._echo(f"[{time.monotonic() - self.t0:6.1f}s] {msg}")

    def enter(self, phase: Phase) -> None:
        if self.phases and phase not in _NEXT[self.phases[-1]]:
            raise AssertionError(f"vllm-switch: illegal transition {self.phases[-1].value} -> {phase.value}")
        self.phases.append(phase)

    def _lock(self) -> FileLock:
        path = lock_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=self.lock_wait)
        except Timeout:
            holder = path.with_suffix(".holder")
            who = holder.read_text().strip() if holder.exists() else "unknown"
            raise SwitchBusy(f"another vllm-switch is running ({who}); it holds {path}. Wait for it, or pass "
                             f"--lock-wait SECONDS to queue behind it") from None
        atomic.write_text(path.with_suffix(".holder"), f"pid {os.getpid()}, started {time.ctime()}")
        return lock

    # -- steps ---------------------------------------------------------------------------------
    def _wait_drained(self, stopped: list[str], target: str) -> list[str]:
        deadline = time.monotonic() + RELEASE_TIMEOUT_S
        last: list[str] = []
        while True:
            held = hoststate.still_held(self.sf, stopped, target)
            if not held:
                return []
            if held != last:
                self.say("waiting: " + "; ".join(held))
                last = held
            if time.monotonic() > deadline:
                return held
            time.sleep(POLL_S)

    def _start_timeout(self, name: str) -> float:
        if self.timeout is not None:
            return self.timeout
        return float(start_timeout_s(self.sf.get(name)))

    def _api_key(self, name: str) -> str | None:
        """The stack's API key for the probes (ApiKeyError names the file when it is unusable)."""
        if name not in self._keys:
            self._keys[name] = apikey.stack_key(self.sf, name)
        return self._keys[name]

    def _wait_ready(self, name: str) -> tuple[bool, str]:
        """(ready?, why not): the probe answers and systemd has finished the start (the unit's own
        ExecStartPost probe passed: `active`), so status and the exporter agree with the outcome.
        Fails fast when the unit dies instead of waiting out the window."""
        stack, t0 = self.sf.get(name), time.monotonic()
        url, deadline = probe_url(stack), t0 + self._start_timeout(name)
        reason, answered, said_at = "not probed yet", "", t0
        while True:
            st = systemd.state(unit_name(name))
            if time.monotonic() - said_at >= PROGRESS_EVERY_S:
                said_at = time.monotonic()
                self.say(f"still waiting for {name}: {st.unit} {st.active} ({st.sub}); last probe: {reason} "
                         f"({time.monotonic() - t0:.0f} s of {self._start_timeout(name):g} s)")
            if st.active in ("failed", "inactive") or st.sub == "auto-restart":
                return False, f"{st.unit} is {st.active} ({st.sub}, result {st.result}) before answering"
            if answered and st.active == "active":
                return True, answered
            left = deadline - time.monotonic()
            if left <= 0:
                return False, f"not ready within {self._start_timeout(name):g}s: {reason}"
            if not answered:
                r = probe.ready(url, stack.model_name, timeout=max(min(10.0, left), 0.1), api_key=self._api_key(name))
                if r.ok:
                    record_ready(name, time.monotonic() - t0)  # the exporter's exec -> ready phase
                    answered, reason = r.reason, f"it answers, systemd still has it {st.active} ({st.sub})"
                    continue
                reason = r.reason
            time.sleep(min(1.0 if not answered else 0.2, max(deadline - time.monotonic(), 0)))

    def _stop(self, names: list[str]) -> None:
        """Stop the units and wait until systemd has them down, saying what it waits for."""
        for n in names:
            self.say(f"stopping {unit_name(n)}")
            systemd.stop_no_block(unit_name(n))
        for n in names:
            unit, t0 = unit_name(n), time.monotonic()
            limit = stop_timeout_s(self.sf.get(n)) + systemd.STOP_MARGIN_S
            said_at = t0
            while (st := systemd.state(unit)).running:
                if time.monotonic() - t0 > limit:
                    raise systemd.SystemdError(f"{unit} did not stop within {limit:g} s (it is {st.active}, {st.sub}); "
                                               f"see `journalctl -u {unit}`")
                if time.monotonic() - said_at >= PROGRESS_EVERY_S:
                    said_at = time.monotonic()
                    self.say(f"still stopping {unit}: {st.active} ({st.sub}), {time.monotonic() - t0:.0f} s of "
                             f"{limit:g} s")
                time.sleep(POLL_S)

    def _wait_requests(self, names: list[str]) -> list[str]:
        """The stacks about to be stopped finish their requests first (unless --force); [] when they did."""
        running = [n for n in names if hoststate.view(self.sf, n).state.active == "active"]
        if self.force or not running:
            if self.force and running:
                self.say(f"--force: not waiting for requests on {', '.join(running)}")
            return []
        return inflight.wait_idle(self.sf, running, self.drain_timeout, self.say)

    def _start_and_wait(self, name: str, track: bool = True) -> tuple[bool, str]:
        self.say(f"starting {unit_name(name)}")
        systemd.start(unit_name(name))
        if not self.wait:
            return True, "started (--no-wait: readiness not awaited)"
        if track:
            self.enter(Phase.WAITING_READY)
        self.say(f"waiting for {name} to answer a 1-token completion at {probe_url(self.sf.get(name))}")
        return self._wait_ready(name)

    # -- the machine ---------------------------------------------------------------------------
    def run(self, target: str) -> Outcome:
        self.sf.get(target)  # unknown name: StackFileError before any lock or change
        lock = self._lock()
        self.enter(Phase.LOCKED)
        try:
            out = self._switch(target)
        finally:
            lock.release()
        out.phases = list(self.phases)
        return out

    def _switch(self, target: str) -> Outcome:
        self.enter(Phase.PLANNED)
        previous = None
        try:
            views = hoststate.views(self.sf)
            active = [n for n, v in views.items() if v.running]
            clashing = [n for n in hoststate.conflicting(self.sf, target) if views[n].running]
            previous = clashing[0] if clashing else next((n for n in active if n != target), None)
            outcome = self._switch_planned(target, views, clashing)
            self._remember_for_boot(target, clashing, outcome)
        except hostcmd.HostCommandError as e:
            if self.phases[-1] is not Phase.FAILED:
                self.enter(Phase.FAILED)
            self.say(f"FAILED: {e}")
            outcome = Outcome("timeout", f"{target}: {e}; nothing was rolled back: check the units with "
                                         f"`vllm-switch status` and `systemctl status 'radiance-*'`")
        switch_history.record(previous if previous != target else None, target, outcome.outcome,
                              time.monotonic() - self.t0)
        return outcome

    def _remember_for_boot(self, target: str, clashing: list[str], outcome: Outcome) -> None:
        """The boot choice follows what this switch left running (deploy/boot.py)."""
        units = {"ok": ([target], clashing), "rolled_back": ([], [target]), "timeout": ([], [target, *clashing])}
        if outcome.outcome not in units:
            return  # refused: nothing changed
        add, remove = units[outcome.outcome]
        chosen = boot.update(add=[unit_name(n) for n in add], remove=[unit_name(n) for n in remove])
        self.say(f"at boot: {', '.join(chosen) if chosen else 'no radiance stack'} will be started")

    def _switch_planned(self, target: str, views, clashing: list[str]) -> Outcome:
        port = self.sf.get(target).port
        why = precheck.refusal(self.sf, target, views, self._api_key)
        if why:
            self.enter(Phase.REFUSED)
            return Outcome("refused", why)
        strangers = hoststate.strangers_on_port(self.sf, port)
        if strangers:
            self.enter(Phase.REFUSED)
            who = ", ".join(h.describe() for h in strangers)
            return Outcome("refused", f"port {port} is held by {who}, which is not a radiance stack; "
                                      f"not touching it. Stop it yourself or give {target} another port")
        if views[target].running and not clashing:
            self.say(f"{views[target].unit} is already {views[target].state.active}")
            self.enter(Phase.WAITING_READY)
            ok, why = self._wait_ready(target) if self.wait else (True, "--no-wait")
            if ok:
                self.enter(Phase.READY)
                return Outcome("ok", f"{target} is active and ready: {why}")
            return self._fail(target, [], why)
        if clashing:
            self.enter(Phase.WAITING_REQUESTS)
            busy = self._wait_requests(clashing)
            if busy:
                self.enter(Phase.REFUSED)
                return Outcome("refused", f"{', '.join(busy)} still serve requests after {self.drain_timeout:g} s; "
                                          f"nothing was stopped. Try again later, give --drain-timeout more seconds, "
                                          f"or pass --force to stop now (their requests fail)")
            self.enter(Phase.STOPPING)
            self._stop(clashing)
        self.enter(Phase.DRAINING)
        held = self._wait_drained(clashing, target)
        if held:
            return self._fail(target, clashing, "resources not released after stopping: " + "; ".join(held),
                              started=False)
        self.enter(Phase.STARTING)
        ok, why = self._start_and_wait(target)
        if ok:
            self.enter(Phase.READY)
            return Outcome("ok", f"{target} is ready: {why}")
        return self._fail(target, clashing, why)

    def _fail(self, target: str, previous: list[str], why: str, started: bool = True) -> Outcome:
        self.enter(Phase.FAILED)
        self.say(f"FAILED: {why}")
        journal = systemd.journal_tail(unit_name(target), 30) if started else ""
        if journal:
            self.say(f"last journal lines of {unit_name(target)}:\n{journal}")
        if started:
            # It may hold the GPUs/port while loading; the previous stack cannot start beside it.
            self._stop([target])
        if not (self.rollback and previous):
            note = "" if previous else " (nothing was active before, nothing to roll back to)"
            return Outcome("timeout", f"{target}: {why}{note}", journal=journal)
        self.enter(Phase.ROLLING_BACK)
        self.say(f"rolling back to {', '.join(previous)}")
        held = self._wait_drained([target], previous[0])
        results = [self._start_and_wait(p, track=False) for p in previous] if not held else [(False, "; ".join(held))]
        if all(ok for ok, _ in results):
            self.enter(Phase.ROLLED_BACK)
            return Outcome("rolled_back", f"{target}: {why}; rolled back to {', '.join(previous)}", journal=journal)
        self.enter(Phase.FAILED)
        return Outcome("timeout", f"{target}: {why}; rollback to {', '.join(previous)} failed too: "
                                  + "; ".join(w for ok, w in results if not ok), journal=journal)


def stop_all(sf: StackFile, names: list[str] | None, echo: Callable[[str], None] = print,
             lock_wait: float = 0.0, force: bool = False,
             drain_timeout: float = inflight.DRAIN_TIMEOUT_S) -> list[str]:
    """Stop the named (default: every running) radiance stack, after their running requests (unless
    `force`), and wait until their resources are free. Returns what is still held (empty on
    success); raises StillBusy when requests outlast `drain_timeout` (nothing stopped then)."""
    sw = Switch(sf, lock_wait=lock_wait, echo=echo, force=force, drain_timeout=drain_timeout)
    lock = sw._lock()
    try:
        running = [n for n, v in hoststate.views(sf).items() if v.running and (not names or n in names)]
        busy = sw._wait_requests(running)
        if busy:
            raise StillBusy(f"{', '.join(busy)} still serve requests after {drain_timeout:g} s; nothing was "
                            f"stopped. Give --drain-timeout more seconds, or pass --force to stop now")
        chosen = boot.update(remove=[unit_name(n) for n in names] if names else boot.chosen())
        sw.say(f"at boot: {', '.join(chosen) if chosen else 'no radiance stack'} will be started")
        if not running:
            sw.say("no radiance stack is running")
            return []
        sw._stop(running)
        held: list[str] = []
        for n in running:
            held += sw._wait_drained(running, n)
        return sorted(set(held))
    finally:
        lock.release()
