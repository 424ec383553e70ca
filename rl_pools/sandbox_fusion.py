"""Client for a SandboxFusion-compatible code-execution service (``POST /run_code``).

Use it when programs must run on a remote sandbox cluster instead of the local bubblewrap
sandbox. Results come back as the same :class:`rl_pools.sandbox.ExecutionResult`, so grading code
does not care where a program ran. Request: ``{code, language, run_timeout, stdin}``; response:
``{status, message, run_result: {status, stdout, stderr, return_code, execution_time}}``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from curation.errors import ConfigError
from rl_pools.sandbox import ExecutionResult, SandboxUnavailable


@dataclass
class SandboxFusionConfig:
    """Where the service is and how long to wait for it."""

    base_url: str = field(
        default="http://127.0.0.1:8080", metadata={"help": "service URL, without /run_code"}
    )
    language: str = field(default="python", metadata={"help": "SandboxFusion language name"})
    request_timeout_s: float = field(
        default=30.0, metadata={"help": "HTTP timeout on top of the run time limit, seconds"}
    )
    max_output_bytes: int = field(
        default=1 << 20, metadata={"help": "cap applied to returned stdout/stderr, bytes each"}
    )

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"SandboxFusionConfig.base_url must be http(s)://, got {self.base_url!r}"
            )


def _from_response(data: dict[str, Any], wall: float, cap: int, tl: float) -> ExecutionResult:
    run = data.get("run_result") or {}
    out, err = run.get("stdout") or "", run.get("stderr") or ""
    res = ExecutionResult(
        status="passed",
        exit_code=run.get("return_code"),
        stdout=out[:cap],
        stderr=err[:cap],
        wall_s=round(float(run.get("execution_time") or wall), 4),
        stdout_truncated=len(out) > cap,
        stderr_truncated=len(err) > cap,
        limits={"time_limit_s": tl, "remote": True},
    )
    top, rstat = data.get("status"), run.get("status")
    if rstat == "TimeLimitExceeded":
        res.status, res.reason = "timeout", f"time limit {tl:g}s exceeded (remote)"
    elif top == "SandboxError" or not run:
        res.status = "sandbox_error"
        res.reason = f"remote sandbox error: {data.get('message') or top or 'no run_result'}"
    elif "MemoryError" in err[-2000:]:
        res.status, res.reason = "memory", "MemoryError (remote)"
    elif res.exit_code != 0 or rstat not in ("Finished", None):
        res.status = "runtime_error"
        res.reason = f"exit code {res.exit_code} ({rstat})"
    if res.status == "passed" and (res.stdout_truncated or res.stderr_truncated):
        res.status, res.reason = "output_limit", f"output exceeded {cap} bytes; truncated"
    return res


class SandboxFusionClient:
    """Runs programs on a SandboxFusion service. Thread-safe (one httpx client, pooled)."""

    def __init__(self, config: SandboxFusionConfig | None = None) -> None:
        import httpx

        self.config = config or SandboxFusionConfig()
        self._http = httpx.Client(base_url=self.config.base_url)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SandboxFusionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(
        self, program: str, stdin: str = "", *, time_limit_s: float = 5.0
    ) -> ExecutionResult:
        """Run ``program`` remotely. A service that answers badly is ``sandbox_error``; one that
        cannot be reached raises :class:`SandboxUnavailable`."""
        import httpx

        cfg = self.config
        payload = {
            "code": program,
            "language": cfg.language,
            "run_timeout": time_limit_s,
            "stdin": stdin,
        }
        t0 = time.monotonic()
        try:
            resp = self._http.post(
                "/run_code", json=payload, timeout=time_limit_s + cfg.request_timeout_s
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise SandboxUnavailable(
                f"cannot reach the SandboxFusion service at {cfg.base_url}: {exc}",
                hint="start the service or fix SandboxFusionConfig.base_url",
            ) from exc
        except httpx.HTTPError as exc:
            return ExecutionResult(
                "sandbox_error", None, "", "", time.monotonic() - t0, reason=f"HTTP error: {exc}"
            )
        wall = time.monotonic() - t0
        if resp.status_code != 200:
            return ExecutionResult(
                "sandbox_error",
                None,
                "",
                "",
                round(wall, 4),
                reason=f"HTTP {resp.status_code}: {resp.text[:300]}",
            )
        try:
            data = resp.json()
        except ValueError:
            return ExecutionResult(
                "sandbox_error", None, "", "", round(wall, 4), reason="response is not JSON"
            )
        return _from_response(data, wall, cfg.max_output_bytes, time_limit_s)
