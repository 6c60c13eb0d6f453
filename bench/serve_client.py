"""The serving benchmark's client: the workloads one server is measured on, over its OpenAI API.

Prompts are token ids drawn from a seed (every request distinct, so prefix caching saves no work),
greedy, `ignore_eos` so every request generates exactly what it asked for. Timing is the client's
wall clock around streamed completions: time to first token per request, and tokens over the
span from the first request sent to the last token received.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

import httpx

VOCAB_DRAW = 150000  # ids below Qwen's special tokens (151643 on)


@dataclass
class Request:
    ttft_s: float
    total_s: float
    tokens: int


def prompts(seed: int, count: int, length: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(VOCAB_DRAW) for _ in range(length)] for _ in range(count)]


async def _stream(client: httpx.AsyncClient, base: str, model: str, prompt: list[int], max_tokens: int) -> Request:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    async with client.stream("POST", f"{base}/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{base}: HTTP {r.status_code}: {(await r.aread()).decode()[:500]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if ttft is None and any(c.get("text") for c in chunk.get("choices", [])):
                ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return Request(ttft if ttft is not None else total, total, tokens)


async def _burst(base: str, model: str, batch: list[list[int]], max_tokens: int) -> tuple[float, list[Request]]:
    limits = httpx.Limits(max_connections=len(batch) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        t0 = time.perf_counter()
        reqs = await asyncio.gather(*(_stream(client, base, model, p, max_tokens) for p in batch))
        return time.perf_counter() - t0, list(reqs)


def decode_round(base: str, model: str, concurrency: int, max_tokens: int, seed: int, prompt_len: int = 64) -> dict:
    """`concurrency` requests at once; output tokens per second of wall time, and per request."""
    wall, reqs = asyncio.run(_burst(base, model, prompts(seed, concurrency, prompt_len), max_tokens))
    tokens = sum(r.tokens for r in reqs)
    if tokens != concurrency * max_tokens:
        raise RuntimeError(f"{base}: {tokens} tokens came back, {concurrency} x {max_tokens} were asked for")
    per_req = [(r.tokens - 1) / (r.total_s - r.ttft_s) for r in reqs if r.total_s > r.ttft_s]
    return {"tokens_per_s": tokens / wall, "wall_s": wall, "decode_tokens_per_s_per_request": statistics.median(per_req),
            "ttft_p50_s": statistics.median(r.ttft_s for r in reqs)}


def prefill(base: str, model: str, prompt_len: int, count: int, seed: int) -> dict:
    """Distinct prompts of prompt_len tokens, one token each: one at a time (time to first token),
    then all at once (prompt tokens per second of wall time)."""
    ttfts = [asyncio.run(_burst(base, model, [p], 1))[1][0].ttft_s for p in prompts(seed, count, prompt_len)]
    wall, _ = asyncio.run(_burst(base, model, prompts(seed + 1, count, prompt_len), 1))
    return {"ttft_p50_s": statistics.median(ttfts), "ttft_max_s": max(ttfts),
            "prefill_tokens_per_s": count * prompt_len / wall, "sequential_tokens_per_s": prompt_len / statistics.median(ttfts)}


def samples(base: str, model: str, seed: int, count: int = 4, prompt_len: int = 128, max_tokens: int = 32) -> list[dict]:
    """Greedy continuations with their logprobs, and every prompt token's logprob (what the paths
    and the CPU reference are compared on)."""
    out = []
    with httpx.Client(timeout=600) as client:
        for p in prompts(seed, count, prompt_len):
            body = {"model": model, "prompt": p, "max_tokens": max_tokens, "temperature": 0.0, "logprobs": 1,
                    "prompt_logprobs": 1, "ignore_eos": True}
            r = client.post(f"{base}/v1/completions", json=body)
            if r.status_code != 200:
                raise RuntimeError(f"{base}: HTTP {r.status_code}: {r.text[:500]}")
            choice = r.json()["choices"][0]
            lp = choice["logprobs"]
            prompt_lp = [None] + [_chosen(d, tok) for d, tok in zip(choice["prompt_logprobs"][1:], p[1:])]
            out.append({"prompt": p, "tokens": lp["tokens"], "logprobs": lp["token_logprobs"], "prompt_logprobs": prompt_lp})
    return out


def _chosen(entry: dict, token: int) -> float:
    """The logprob of the prompt's own token from vLLM's prompt_logprobs entry (keyed by token id)."""
    return float(entry[str(token)]["logprob"])
