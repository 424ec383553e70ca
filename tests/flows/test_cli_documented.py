"""Every CLI command is documented in README.md (the sqlite-utils habit)."""

from pathlib import Path

import typer.main

from flows.cli import app

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _commands(group, prefix):
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):  # a command group
            yield from _commands(cmd, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}"


def test_every_command_is_in_the_readme():
    root = typer.main.get_command(app)
    commands = list(_commands(root, "sluice"))
    assert len(commands) >= 3
    missing = [c for c in commands if c not in README]
    assert not missing, f"commands missing from README.md: {missing}"


def test_readme_states_the_two_setup_commands():
    assert "make setup" in README and "make test" in README
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "make setup" in ci and "make test" in ci
