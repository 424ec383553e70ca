"""`sluice sandbox ...`: run untrusted programs in the bubblewrap sandbox."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Run untrusted Python programs in a sandbox.")


@app.command("run")
def run(
    program: Path = typer.Argument(..., help="Python program to run", exists=False),
    stdin: Path | None = typer.Option(None, "--stdin", help="file fed to the program's stdin"),
    time_limit: float = typer.Option(5.0, "--time-limit", help="wall-clock limit, seconds"),
    memory_mb: int = typer.Option(
        512,
        "--memory-mb",
        help="memory limit, MiB: each process's address space and, with cgroups, the whole run",
    ),
    cgroups: str = typer.Option(
        "auto",
        "--cgroups",
        help="a cgroup per run capping its memory and processes: auto | require | off",
    ),
    cpu_cores: float = typer.Option(
        1.0,
        "--cpu-cores",
        help="CPU of the whole run, in cores, where cgroups have the cpu controller; 0 = no cap",
    ),
) -> None:
    """Run PROGRAM once in the sandbox and print one JSON result object.

    Exit code 0 whenever the sandbox worked, whatever the program did; read `status`. Exit
    code 2 when it did not: status sandbox_error (the JSON is still printed, then one error
    line), the sandbox unavailable, or a bad argument.
    `cgroup` says whether the run had its own cgroup (and its peak memory) or why not.
    """
    from curation.errors import ConfigError, InputError, NotFoundError
    from rl_pools.sandbox import SandboxConfig, SandboxUnavailable, execute

    if program.is_dir():
        raise InputError(f"program {program} is a folder", hint="pass the path of a .py file")
    if not program.exists():
        raise NotFoundError(f"program {program} not found", hint="pass the path of a .py file")
    if not program.is_file():  # /dev/zero would be read until memory runs out
        raise InputError(f"program {program} is not a regular file", hint="pass a .py file")
    data = b""
    if stdin is not None:
        if stdin.is_dir():
            raise InputError(f"--stdin {stdin} is a folder", hint="pass the path of a file")
        if not stdin.exists():
            raise NotFoundError(f"stdin file {stdin} not found", hint="check --stdin")
        if not stdin.is_file():
            raise InputError(
                f"--stdin {stdin} is not a regular file", hint="save the input to a file"
            )
        data = stdin.read_bytes()
    try:
        cfg = SandboxConfig(
            time_limit_s=time_limit,
            memory_mb=memory_mb,
            cgroups=cgroups,
            cpu_cores=cpu_cores if cpu_cores != 0 else None,
        )
    except ConfigError as e:  # name the option the user typed, not only the config field
        opt = (
            "--memory-mb"
            if "memory_mb" in e.message
            else "--cpu-cores"
            if "cpu_cores" in e.message
            else "--cgroups"
            if "cgroups" in e.message
            else "--time-limit"
        )
        raise ConfigError(f"{opt}: {e.message}", hint=e.hint) from None
    # The file's bytes, unchanged: Python decodes them in the sandbox (coding line or UTF-8), so
    # the program that runs is the file, whatever its encoding.
    res = execute(program.read_bytes(), data, cfg)
    typer.echo(res.to_json())
    if res.status == "sandbox_error":  # the program never ran: not a result a caller may read
        raise SandboxUnavailable(
            f"the sandbox failed; {program} did not run: {res.reason}",
            hint="fix what it says (docs/sandbox.md lists what the sandbox needs) and run again",
        )
