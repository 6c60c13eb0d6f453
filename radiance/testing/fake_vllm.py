"""A FAKE vLLM OpenAI server for the systemd/vllm-switch tests (stdlib only, starts in ~0.1 s).

It stands in for vLLM only where a real one cannot run: three systemd units switching back and
forth inside a container on a 2-core machine. It answers the routes the ready probe and
`vllm-switch` use, the way vLLM does:

    GET  /health           200 once "loaded" (after --load-s)
    GET  /v1/models        {"data": [{"id": MODEL}]}
    POST /v1/completions   one-token completion; 503 while not ready

Variants that reproduce field failures:
    --never-ready          /health says 200 but completions always fail (vLLM #39863: /health is
                           not readiness)
    --hold-after-term S    on SIGTERM keep the port bound S seconds before exiting (a slow vLLM
                           shutdown: the next stack must wait for the port, llama-swap #827)

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


def _handler(args: argparse.Namespace, started: float) -> type[BaseHTTPRequestHandler]:
    def loaded() -> bool:
        return time.monotonic() - started >= args.load_s

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):  # journald gets one line per request on stderr
            sys.stderr.write(f"fake_vllm[{args.model}] {fmt % a}\n")

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
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
            self._send(200, {
                "id": "cmpl-fake", "object": "text_completion", "model": args.model,
                "choices": [{"index": 0, "text": " Paris", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            })

    return Handler


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--load-s", type=float, default=0.5, help="seconds before /health turns 200")
    p.add_argument("--never-ready", action="store_true")
    p.add_argument("--hold-after-term", type=float, default=0.0)
    args = p.parse_args(argv)

    server = ThreadingHTTPServer((args.host, args.port), _handler(args, time.monotonic()))
    server.daemon_threads = True

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
