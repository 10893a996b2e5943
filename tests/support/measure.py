"""``solci measure`` in a child process for the harness tests: ``FAKES``, the path of the fake kernels
(``--impl FAKES:NAME``), and ``run_measure`` (exit code, result document, stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import PROJECT

FAKES = str(PROJECT / "tests" / "support" / "fake_kernels.py")


def run_measure(
    tmp_path: Path, *args: str, name: str = "r.json", env: dict[str, str] | None = None
) -> tuple[int, dict | None, str]:
    """``solci measure ARGS --out tmp_path/name`` with ``env`` added to this process's environment."""
    out = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "ci.cli", "measure", *args, "--out", str(out)],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **(env or {})),
    )
    doc = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, doc, proc.stderr
