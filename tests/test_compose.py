"""docker-compose.yml, Dockerfile and the GitHub workflow are well-formed (no engine needed)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.repo_factory import PROJECT

yaml = pytest.importorskip("yaml")


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (v1) is not installed")
def test_compose_file_is_valid() -> None:
    for args in ([], ["--profile", "cpu"]):
        res = subprocess.run(["docker-compose", *args, "config"], cwd=PROJECT, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert res.returncode == 0, res.stderr
    config = yaml.safe_load(res.stdout)
    services = config["services"]
    assert {"runner", "runner-cpu", "dashboard"} <= set(services)
    assert services["runner"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert services["dashboard"]["command"][:2] == ["solci", "dashboard"]
    assert any("8501" in str(p) for p in services["dashboard"]["ports"])
    for name in ("runner", "dashboard"):
        assert any("/data" in str(v) for v in services[name]["volumes"])


def test_workflow_measures_every_commit_of_the_push() -> None:
    wf = yaml.safe_load((PROJECT / ".github" / "workflows" / "solci.yml").read_text())
    job = wf["jobs"]["measure"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert 'git rev-list --reverse "$BEFORE..$AFTER"' in script
    assert 'solci" run --repo . --commit "$sha"' in script


def test_dockerfile_caches_dependencies_before_the_source() -> None:
    lines = [ln.split()[0:2] for ln in (PROJECT / "Dockerfile").read_text().splitlines() if ln and ln[0].isupper()]
    copies = [ln for ln in lines if ln[0] == "COPY"]
    assert copies[0] == ["COPY", "pyproject.toml"] and copies[-1] == ["COPY", "."]
    assert ["ARG", "BASE_IMAGE=solci-deps:latest"] in lines
