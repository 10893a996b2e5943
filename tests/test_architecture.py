"""The layout's rules (docs/ARCHITECTURE.md), read from the source by scripts/import_graph.py: arrows point down
only, no import circle, no unexplained import inside a function; the tests mirror the packages and no test
module imports another."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROJECT

GRAPH = PROJECT / "scripts" / "import_graph.py"


def _graph(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(GRAPH), "--root", str(root)], capture_output=True, text=True, timeout=120
    )


def test_the_project_keeps_its_arrows_pointing_down() -> None:
    proc = _graph(PROJECT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "upward arrows: 0" in proc.stdout and "import circles: 0" in proc.stdout
    assert "(0 without a '# lazy:' reason)" in proc.stdout


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for pkg in ("problem", "kernel", "storage", "dashboard", "ci", "ci/cli", "ci/service", "ci/verdict", "ci/harness"):
        init = tmp_path / pkg / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        if not init.exists():
            init.write_text("")
    return tmp_path


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"storage/a.py": "from ci.cli import main\n", "ci/cli/main.py": ""}, "storage.a:1 -> ci.cli.main"),
        (
            {"dashboard/v.py": "from ci.verdict import rules\n", "ci/verdict/rules.py": ""},
            "dashboard.v:1 -> ci.verdict",
        ),
        ({"ci/harness/m.py": "from ci.service import runner\n", "ci/service/runner.py": ""}, "-> ci.service.runner"),
        ({"problem/w.py": "import kernel.backward\n", "kernel/backward.py": ""}, "problem.w:1 -> kernel.backward"),
    ],
)
def test_an_arrow_pointing_up_or_sideways_is_refused(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    proc = _graph(_tree(tmp_path, files))
    assert proc.returncode == 1 and "upward arrows: 1" in proc.stdout and expected in proc.stdout, proc.stdout


def test_an_import_circle_is_refused(tmp_path: Path) -> None:
    proc = _graph(_tree(tmp_path, {"storage/a.py": "from storage import b\n", "storage/b.py": "import storage.a\n"}))
    assert proc.returncode == 1 and "import circles: 1" in proc.stdout and "storage.a <-> storage.b" in proc.stdout


def test_an_import_inside_a_function_must_say_why(tmp_path: Path) -> None:
    hidden = "def f():\n    from storage import b\n    return b\n"
    said = "def f():\n    # lazy: b is slow to import\n    from storage import b\n    return b\n"
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ci.cli import main\n"
    proc = _graph(_tree(tmp_path, {"storage/a.py": hidden, "storage/b.py": ""}))
    assert proc.returncode == 1 and "storage.a:2 -> storage.b" in proc.stdout, proc.stdout
    proc = _graph(_tree(tmp_path, {"storage/a.py": said, "storage/c.py": typed, "ci/cli/main.py": ""}))
    assert proc.returncode == 0, proc.stdout  # a reason given; an annotation-only import is no arrow


def _test_modules() -> list[Path]:
    return sorted(p for p in (PROJECT / "tests").rglob("test_*.py") if "support" not in p.parts)


def test_no_test_module_imports_another() -> None:
    names = {p.stem for p in _test_modules()}
    offenders = []
    for path in _test_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported = node.module.split(".")
            elif isinstance(node, ast.Import):
                imported = [part for a in node.names for part in a.name.split(".")]
            else:
                continue
            if names & set(imported):
                offenders.append(f"{path.relative_to(PROJECT)}:{node.lineno}")
    assert not offenders, offenders


def test_the_tests_mirror_the_packages() -> None:
    """Each test module sits in the folder of the room it tests (tests/<room>/), or at tests/ for the
    project as a whole (documents, containers, workflow, scripts, this file)."""
    rooms = {"problem", "kernel", "storage", "harness", "verdict", "service", "cli", "dashboard"}
    folders = {p.parent.name for p in _test_modules() if p.parent != PROJECT / "tests"}
    assert folders and folders <= rooms, folders
