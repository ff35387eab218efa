"""CLI honesty (#12): every documented command parses, global options go anywhere, one-line errors with a
non-zero exit, no store created by a command that only reads or repairs one, a closed pipe is no crash."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tempomem.cli import build_parser
from tempomem.cli.app import subparsers
from tests.test_cli import REPO, tempomem, write_config

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md")), REPO / "examples" / "README.md"]
# `tempomem CMD` in inline code anywhere, or at the start of a line inside a fenced code block
INLINE = re.compile(r"`tempomem ((?:--\S+ \S+ )*)([a-z][a-z-]*)")
IN_BLOCK = re.compile(r"^\s*(?:\S*/)?tempomem ((?:--\S+ \S+ )*)([a-z][a-z-]*)")


def documented_commands() -> set[str]:
    found: set[str] = set()
    for doc in DOCS:
        if not doc.exists():
            continue
        in_block = False
        for line in doc.read_text().splitlines():
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            found |= {m.group(2) for m in INLINE.finditer(line)}
            if in_block and (match := IN_BLOCK.match(line)):
                found.add(match.group(2))
    return found


def registered_commands() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)


def test_every_documented_command_is_registered_and_parses_help() -> None:
    documented = documented_commands()
    assert {"worker", "search", "adopt-replay", "recurate", "import"} <= documented  # the scan itself works
    assert documented - registered_commands() == set()
    for command in sorted(documented):
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args([command, "--help"])
        assert done.value.code == 0, command


def test_every_registered_command_is_documented() -> None:
    assert registered_commands() - documented_commands() == set()


def test_global_config_goes_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    assert parser.parse_args(["--config", "a.json", "health"]).config == "a.json"
    assert parser.parse_args(["health", "--config", "b.json"]).config == "b.json"
    assert parser.parse_args(["import", "apply", "x.tgz", "--config", "c.json"]).config == "c.json"
    assert parser.parse_args(["health"]).config is None
    assert all("--config" in p._option_string_actions for p in subparsers(parser))


def test_config_after_the_subcommand_is_used(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.json", {"mode": "lite", "writeMode": "append-host-summary", "path": "m"})
    (tmp_path / "m" / ".capture-intake" / "pending").mkdir(parents=True)
    after = tempomem("inspect", "--json", "--config", str(cfg), cwd=tmp_path / "m")
    assert after.returncode == 0, after.stderr
    assert '"pending": 0' in after.stdout


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
@pytest.mark.parametrize(
    "command",
    [
        "health",
        "rebuild",
        "search q",
        "inspect",
        "journal --from 2026-01-01 --through 2026-01-02 --tz UTC",
        "retry",
        "adopt-replay",
    ],
)
def test_a_missing_store_is_refused_and_never_created(tmp_path: Path, command: str) -> None:
    cfg = write_config(tmp_path / "c.json", {"mode": "lite", "path": "nowhere"})
    proc = tempomem("--config", str(cfg), *command.split(), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: no memory store at {tmp_path / 'nowhere'} (memory.path of the config); nothing was created"
    ]
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "c.json",
        {"mode": "lite", "writeMode": "append-host-summary", "path": "m"},
        {"address": "127.0.0.1:1"},
    )
    proc = tempomem("--config", str(cfg), "worker", cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: cannot reach Temporal at 127.0.0.1:1 (namespace default)")


def test_an_unknown_namespace_is_one_line(client, tmp_path: Path) -> None:
    address = client.service_client.config.target_host
    cfg = write_config(
        tmp_path / "c.json",
        {"mode": "lite", "writeMode": "append-host-summary", "path": "m"},
        {"address": address, "namespace": "no-such-namespace"},
    )
    proc = tempomem("--config", str(cfg), "worker", cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "no-such-namespace" in line


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.json", {"mode": "lite", "writeMode": "append-host-summary", "path": "m"})
    (tmp_path / "m" / ".capture-intake" / "pending").mkdir(parents=True)
    reader, writer = __import__("os").pipe()
    __import__("os").close(reader)  # the reader is gone before tempomem writes (like `| head` finishing)
    proc = subprocess.run(
        [sys.executable, "-m", "tempomem.cli", "--config", str(cfg), "inspect", "--json"],
        cwd=tmp_path,
        stdout=writer,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    __import__("os").close(writer)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_CLI19_a_disabled_recall_tool_never_disables_operator_inspection(tmp_path: Path) -> None:
    memory = {
        "mode": "lite",
        "writeMode": "append-host-summary",
        "path": "m",
        "recallTool": {"enabled": False},
    }
    cfg = write_config(tmp_path / "c.json", memory)
    for folder in ("m", "m/.capture-intake", "m/.capture-intake/pending"):
        (tmp_path / folder).mkdir(mode=0o700)
    for args in (("inspect", "--json"), ("health", "--json"), ("search", "anything", "--json")):
        ran = tempomem("--config", str(cfg), *args, cwd=tmp_path)
        assert ran.returncode == 0, (args, ran.stderr)


@pytest.mark.parametrize("flag", ["--window", "--batch"])
def test_recurate_window_and_batch_must_be_whole_numbers_of_at_least_one(flag: str, tmp_path: Path) -> None:
    """#15 item 1: `recurate --window/--batch` are usage errors below 1 or not a number, naming the
    option and the value, before any store or cluster is touched."""
    for value, says in (("0", "0 is less than 1"), ("x", "'x' is not a whole number")):
        proc = tempomem("recurate", "--since", "2026-12-01", flag, value, cwd=tmp_path)
        assert proc.returncode == 2
        assert f"argument {flag}: {says}" in proc.stderr
    assert not (tmp_path / ".tempomem").exists()  # the embedded default store path
