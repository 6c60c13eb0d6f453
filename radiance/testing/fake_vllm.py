"""A FAKE vLLM OpenAI server for the systemd/vllm-switch tests (stdlib only, starts in ~0.1 s).

It stands in for vLLM only where a real one cannot run: three systemd units switching back and
forth inside a container on a 2-core machine. It answers the routes the ready probe and
`vllm-switch` use, the way vLLM does:

    GET  /health           200 once "loaded" (after --load-s)
    GET  /v1/models        {"data": [{"id": MODEL}]}
    POST /v1/completions   `max_tokens` tokens (default 1), one every --token-s seconds, at most
                           --max-num-seqs requests at a time (the rest wait for a slot); 503 while
                           not ready
    GET  /metrics          vLLM's names: requests running / waiting, generated-token and
                           finished-request counters

Variants that reproduce field failures:
    --never-ready          /health says 200 but completions always fail (vLLM #39863: /health is
                           not readiness)
    --hold-after-term S    on SIGTERM keep the port bound S seconds before exiting (a slow vLLM
                           shutdown: the next stack must wait for the port, llama-swap #827)
    --token-s S            seconds per generated token: long generations keep every slot busy, as
                           on a loaded server (a huge value: an engine that stopped generating)

With VLLM_API_KEY in its environment it refuses `/v1/*` without `Authorization: Bearer <key>`
(401), as vLLM does; /health stays open.

Run: python3 -m radiance.testing.fake_vllm --port 8080 --model demo [--never-ready]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Engine:
    """Requests running and waiting, and the counters vLLM exports, shared by the handler threads."""

    def __init__(self, max_num_seqs: int) -> None:
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(max_num_seqs)
        self.running = self.waiting = self.generated = self.finished = 0

    def generate(self, max_tokens: int, token_s: float) -> None:
        with self.lock:
            self.waiting += 1
        self.slots.acquire()
        with self.lock:
            self.waiting -= 1
            self.running += 1
        try:
            for _ in range(max_tokens):
                time.sleep(token_s)
                with self.lock:
                    self.generated += 1
        finally:
            with self.lock:
                self.running -= 1
                self.finished += 1
            self.slots.release()

    def metrics(self, model: str) -> str:
        labels = f'{{engine="0",model_name="{model}"}}'
        with self.lock:
            return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{labels} {self.running}\n"
                    f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{labels} {self.waiting}\n"
                    f"# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{labels} {self.generated}\n"
                    f"# TYPE vllm:request_success counter\nvllm:request_success_total{labels} {self.finished}\n")


def _handler(args: argparse.Namespace, started: float, engine: Engine) -> type[BaseHTTPRequestHandler]:
    def loaded() -> bool:
        return time.monotonic() - started >= args.load_s

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):  # journald gets one line per request on stderr
            sys.stderr.write(f"fake_vllm[{args.model}] {fmt % a}\n")

        def _send(self, code: int, body: dict | str) -> None:
            data = (json.dumps(body) if isinstance(body, dict) else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refused(self) -> bool:
            key = os.environ.get("VLLM_API_KEY")
            if key and self.path.startswith("/v1") and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, {"error": "Unauthorized"})
                return True
            return False

        def do_GET(self):
            if self._refused():
                return
            if self.path == "/health":
                self._send(200 if loaded() else 503, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": args.model, "object": "model"}]})
            elif self.path == "/metrics":
                self._send(200, engine.metrics(args.model))
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            if self._refused():
                return
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                return self._send(400, {"error": "body is not JSON"})
            if self.path != "/v1/completions":
                return self._send(404, {"error": f"no route {self.path}"})
            if req.get("model") != args.model:
                return self._send(404, {"error": {"message": f"model {req.get('model')!r} does not exist"}})
            if args.never_ready or not loaded():
                return self._send(503, {"error": {"message": "engine is not ready"}})
            n = int(req.get("max_tokens") or 1)
            engine.generate(n, args.token_s)
            self._send(200, {
                "id": "cmpl-fake", "object": "text_completion", "model": args.model,
                "choices": [{"index": 0, "text": " Paris" * n, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
            })

    return Handler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--load-s", type=float, default=0.5, help="seconds before /health turns 200")
    p.add_argument("--never-ready", action="store_true")
    p.add_argument("--hold-after-term", type=float, default=0.0)
    p.add_argument("--token-s", type=float, default=0.0, help="seconds per generated token")
    p.add_argument("--max-num-seqs", type=int, default=4, help="requests generating at once")
    return p.parse_args(argv)


def make_server(args: argparse.Namespace) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((args.host, args.port), _handler(args, time.monotonic(), Engine(args.max_num_seqs)))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    server = make_server(args)

    def on_term(signum, frame):
        def stop():
            # The listening socket stays bound while we "shut down", like a vLLM draining workers.
            time.sleep(args.hold_after_term)
            server.shutdown()
        threading.Thread(target=stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    sys.stderr.write(f"fake_vllm[{args.model}] pid {os.getpid()} listening on {args.host}:{args.port}\n")
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
