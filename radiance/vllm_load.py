"""How busy a vLLM server is and whether it is getting work done, read from its `/metrics`.

vLLM exports the requests it is running and the requests waiting for a slot (gauges), and counts
the tokens it has generated and prefilled and the requests it has finished (counters). The health
probe (radiance.probe.healthy) calls a busy server healthy when one of those counters moves, and
vllm-switch waits for the running requests to finish before it stops a stack. `/metrics` is not
behind vLLM's API key.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
# Counters that move whenever the engine does work: a decode step generates tokens, a finished
# prefill counts its prompt, a request ends, an engine step is observed. Summed, so any one moving
# is progress.
PROGRESS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:request_success_total",
            "vllm:iteration_tokens_total_count")


class MetricsError(ValueError):
    """`/metrics` did not hold what every vLLM server exports."""


@dataclass(frozen=True)
class Load:
    running: float
    waiting: float
    progress: float  # the sum of the PROGRESS counters: only its increase means anything

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0

    def describe(self) -> str:
        return f"{self.running:g} request(s) running, {self.waiting:g} waiting"


def parse(text: str) -> Load:
    """The load in one `/metrics` text (every engine's series summed)."""
    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    except ValueError as e:
        raise MetricsError(f"not Prometheus text: {e}") from None
    missing = [n for n in (RUNNING, WAITING) if n not in sums]
    if missing:
        raise MetricsError(f"no {', '.join(missing)} (is this a vLLM server?)")
    return Load(running=sums[RUNNING], waiting=sums[WAITING], progress=sum(sums.get(n, 0.0) for n in PROGRESS))
