"""The GitHub Actions workflow (issue 9): least permissions, no credentials left in the checkout, the runner's
own pinned solci measures (never the pushed code installed), each commit run with a GPU slot, and exit codes
that keep the infrastructure's failures apart from the commit's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tests.support import PROJECT

WORKFLOW = PROJECT / ".github" / "workflows" / "solci.yml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_least_permissions_and_no_persisted_credentials() -> None:
    wf = _workflow()
    assert wf["permissions"] == {"contents": "read"}
    for job in wf["jobs"].values():
        assert job.get("permissions", wf["permissions"]) == {"contents": "read"}
        checkout = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout")]
        assert checkout and all(s["with"]["persist-credentials"] is False for s in checkout)


def test_the_pushed_code_is_never_installed_or_run_as_the_harness() -> None:
    wf = _workflow()
    scripts = "\n".join(s.get("run", "") for job in wf["jobs"].values() for s in job["steps"])
    assert "pip install" not in scripts and "install -e" not in scripts
    lines = [ln.strip() for ln in scripts.splitlines() if not ln.strip().startswith(("echo", "#"))]
    calls = [ln for ln in lines if "solci" in ln.replace("$SOLCI_", "").replace("solci-", "")]
    assert len(calls) >= 3 and all('"$SOLCI_HOME/bin/solci"' in ln for ln in calls), calls
    assert "--gpu" in scripts, "each runner measures on its own GPU slot"


def _run_script(codes: list[int], tmp_path: Path) -> int:
    """The measuring step's script with a fake solci that exits with ``codes`` in turn."""
    wf = _workflow()
    step = next(s for s in wf["jobs"]["measure"]["steps"] if "Measure each commit" in s.get("name", ""))
    home = tmp_path / "solci"
    (home / "bin").mkdir(parents=True)
    state = tmp_path / "n"
    state.write_text("0")
    fake = home / "bin" / "solci"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = flags ] && exit 0\n'
        f"n=$(cat {state}); echo $((n+1)) > {state}\n"
        f"set -- {' '.join(map(str, codes))}\nshift $n\nexit ${{1:-0}}\n"
    )
    fake.chmod(0o755)
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    shas = []
    for i in range(len(codes) + 1):
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", f"c{i}"], cwd=repo, check=True, env=env)
        shas.append(
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, env=env
            ).stdout.strip()
        )
    env.update(SOLCI_HOME=str(home), SOLCI_GPU="gpu1", BEFORE=shas[0], AFTER=shas[-1], BRANCH="main")
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, env=env, capture_output=True).returncode


def test_exit_codes_keep_infrastructure_apart(tmp_path: Path) -> None:
    assert _run_script([0, 0], tmp_path / "a") == 0
    assert _run_script([0, 3], tmp_path / "b") == 3
    assert _run_script([4, 0], tmp_path / "c") == 4, "an infrastructure failure is its own code"
    assert _run_script([4, 3], tmp_path / "d") == 3
    assert _run_script([3, 1, 4], tmp_path / "e") == 1
