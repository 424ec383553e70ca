"""SandboxFusion client against a local stand-in service on 127.0.0.1 (it runs the code in our
own bubblewrap sandbox and answers in SandboxFusion's format)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from process_helpers import needs_bwrap

from rl_pools.sandbox import SandboxConfig, SandboxUnavailable, execute
from rl_pools.sandbox_fusion import SandboxFusionClient, SandboxFusionConfig

pytestmark = needs_bwrap


class _StandIn(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        if self.path != "/run_code":
            self.send_error(404)
            return
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if req["code"] == "BROKEN":
            body = {"status": "SandboxError", "message": "executor crashed", "run_result": None}
        else:
            r = execute(
                req["code"], req.get("stdin", ""), SandboxConfig(time_limit_s=req["run_timeout"])
            )
            status = "TimeLimitExceeded" if r.status == "timeout" else "Finished"
            body = {
                "status": "Success" if r.exit_code == 0 else "Failed",
                "message": "",
                "run_result": {
                    "status": status,
                    "stdout": r.stdout,
                    "stderr": r.stderr,
                    "return_code": r.exit_code,
                    "execution_time": r.wall_s,
                },
            }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def service():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_remote_results_map_to_sandbox_statuses(service):
    with SandboxFusionClient(SandboxFusionConfig(base_url=service)) as c:
        ok = c.execute("print(int(input()) * 2)", "21\n", time_limit_s=5)
        assert (ok.status, ok.exit_code, ok.stdout) == ("passed", 0, "42\n")
        crash = c.execute("raise KeyError('k')")
        assert crash.status == "runtime_error" and "KeyError" in crash.stderr
        slow = c.execute("while True: pass", time_limit_s=1)
        assert slow.status == "timeout"
        broken = c.execute("BROKEN")
        assert broken.status == "sandbox_error" and "executor crashed" in broken.reason


def test_unreachable_service_raises_with_the_url():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with SandboxFusionClient(SandboxFusionConfig(base_url=f"http://127.0.0.1:{port}")) as c:
        with pytest.raises(SandboxUnavailable, match=str(port)):
            c.execute("print(1)")
