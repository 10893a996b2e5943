"""Every script of scripts/ answers ``--help``: exit 0 and a usage text that names it or says what it is for.

The scripts are found by glob (``*.py`` and ``*.sh``), so a new one is covered as soon as it exists. Python
scripts run with this interpreter from the project root while ``torch`` and ``triton`` cannot be imported (a
stand-in package that raises): a script that loads them before parsing its arguments fails here, since --help
must answer on a machine without a GPU and without the seconds they take to load. Shell scripts run with bash,
with stand-ins on PATH for the commands they would run (Python, pip, nvidia-smi, apt-get, bwrap, git, ...); each
must print its header comment and call none of them: --help runs nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROJECT

SCRIPTS = sorted(p for p in (PROJECT / "scripts").iterdir() if p.is_file() and p.suffix in (".py", ".sh"))
PYTHON_SCRIPTS = [p for p in SCRIPTS if p.suffix == ".py"]
SHELL_SCRIPTS = [p for p in SCRIPTS if p.suffix == ".sh"]
HEAVY = ("torch", "triton")  # slow to import (seconds), and what a GPU diagnostic needs first
# What a script could run: a call of any of these during --help is a failure.
COMMANDS = (
    "python",
    "python3",
    "pip",
    "nvidia-smi",
    "ncu",
    "apt-get",
    "sudo",
    "bwrap",
    "git",
    "tar",
    "timeout",
    "docker",
    "chromium",
)


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


@pytest.fixture(scope="module")
def no_heavy_imports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of stand-ins for torch and triton whose import raises."""
    folder = tmp_path_factory.mktemp("no-heavy-imports")
    for name in HEAVY:
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('{name} imported while answering --help: parse the arguments first')\n"
        )
    return folder


@pytest.fixture()
def stand_ins(tmp_path: Path) -> tuple[Path, Path]:
    """(a folder of commands that log their call and fail, the log they write)."""
    folder, log = tmp_path / "bin", tmp_path / "calls.log"
    folder.mkdir()
    for name in COMMANDS:
        cmd = folder / name
        cmd.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit 1\n')
        cmd.chmod(0o755)
    return folder, log


def header_comment(path: Path) -> str:
    """A shell script's header: its comment lines after the shebang, without their leading '# '."""
    lines = path.read_text().splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line[2:] if line.startswith("# ") else line[1:])
    return "".join(f"{line}\n" for line in header)


def test_the_scripts_are_found() -> None:
    names = _ids(SCRIPTS)
    assert "diag_compile.py" in names and "gpu_kernel_session.sh" in names, names


def _run(cmd: list[str], env: dict[str, str], *, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", PYTHON_SCRIPTS, ids=_ids(PYTHON_SCRIPTS))
def test_python_script_answers_help(script: Path, no_heavy_imports: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(no_heavy_imports), str(PROJECT)])
    proc = _run([sys.executable, str(script.relative_to(PROJECT)), "--help"], env, timeout=120)
    assert proc.returncode == 0, f"{script.name} --help: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert proc.stdout.startswith("usage:"), proc.stdout
    assert script.name in proc.stdout, proc.stdout


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=_ids(SHELL_SCRIPTS))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_shell_script_prints_its_header_and_runs_nothing(
    script: Path, flag: str, stand_ins: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, log = stand_ins
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}", "OUT": str(out)}
    proc = _run(["bash", str(script.relative_to(PROJECT)), flag], env, timeout=60)
    assert proc.returncode == 0, f"{script.name} {flag}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    header = header_comment(script)
    assert header.strip(), f"{script.name} has no header comment saying what it is for"
    assert proc.stdout == header, "--help prints the header comment, all of it and only it"
    assert not log.exists(), f"{script.name} {flag} ran: {log.read_text()}"
    assert not out.exists(), f"{script.name} {flag} made its output folder"


def test_the_gluon_session_names_a_misspelt_step_and_runs_nothing(stand_ins: tuple[Path, Path], tmp_path: Path) -> None:
    """A device call is spent by the time a typo shows: the session script checks every step's name first, says the
    bad one in one line, exits 2, and runs no command (not even nvidia-smi) nor makes its output folder."""
    folder, log = stand_ins
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}", "OUT": str(out)}
    proc = _run(["bash", "scripts/gpu_v19_session.sh", "tests", "bnech"], env, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1 and "'bnech'" in proc.stderr, proc.stderr
    assert not log.exists(), log.read_text()
    assert not out.exists()
