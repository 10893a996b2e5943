"""The dependency image: one recipe (docker/build_base_image.sh) with a CPU and a CUDA variant, pinned by the
one lock (constraints.txt) the venv uses too; what Triton needs at run time inside the CPU variant (CI builds
it: docker/ci_setup.sh --cpu); the stack's versions in the hardware fingerprint.

The image tests skip when no engine answers or solci-deps:cpu is missing, except in CI (CI=true), where
they fail: ./dev test builds the image there first.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess

import pytest

from ci.cli.doctor import variant_pins
from ci.harness.hardware import fingerprint
from tests.support import PROJECT
from tests.support.images import IMAGE, needs_image, run_in_image

SCRIPT = PROJECT / "docker" / "build_base_image.sh"
CONSTRAINTS = PROJECT / "constraints.txt"

# A tiny extension module built the way Triton builds its CUDA driver module at first use
# (triton.runtime.build.compile_module_from_src -> _build: $CC / gcc / clang, -shared -fPIC, -I<Python.h dir>).
EXTENSION_PROBE = r'''
import os, sysconfig
import triton.runtime.build as build
assert hasattr(build, "_build"), "triton.runtime.build._build is gone"
src = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *twice(PyObject *self, PyObject *arg) { return PyLong_FromLong(2 * PyLong_AsLong(arg)); }
static PyMethodDef methods[] = {{"twice", twice, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "solci_test_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_solci_test_ext(void) { return PyModule_Create(&module); }
"""
mod = build.compile_module_from_src(src, "solci_test_ext")
print("include", sysconfig.get_paths()["include"])
print("twice(21) =", mod.twice(21))
print("from", mod.__file__)
'''


# ------------------------------------------------------------------------------------------------ helpers
def print_requirements(variant: str) -> tuple[list[str], dict[str, str]]:
    res = subprocess.run(
        ["bash", str(SCRIPT), "--variant", variant, "--print-requirements"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    head, _, pins = res.stdout.partition("# constraints\n")
    requirements = [ln for ln in head.splitlines() if ln and not ln.startswith("#")]
    parsed = {}
    for line in pins.splitlines():
        name, _, version = line.partition("==")
        parsed[name.lower().replace("_", "-")] = version
    return requirements, parsed


# ------------------------------------------------------------------------------------------------ recipe
def test_the_two_variants_share_one_recipe_and_differ_only_in_torchs_build() -> None:
    cpu_req, cpu = print_requirements("cpu")
    cuda_req, cuda = print_requirements("cuda")
    assert cpu_req == cuda_req  # the same requirements (pyproject.toml's dependencies)
    assert cpu["torch"] == "2.13.0+cpu" and cuda["torch"] == "2.11.0"
    for name in ("triton", "numpy", "duckdb", "pandas", "streamlit", "plotly", "scipy", "ruptures", "docker"):
        assert cpu[name] == cuda[name], name
    assert cpu["triton"] == "3.6.0" and cpu["duckdb"] == "1.5.5"
    assert int(cpu["numpy"].split(".")[1]) < 4  # numpy < 2.4: Triton's interpreter
    # what differs: torch's build, setuptools (torch 2.11 wants < 82) and the CUDA wheels of the CUDA build
    changed = {k for k in cpu.keys() & cuda.keys() if cpu[k] != cuda[k]}
    assert changed == {"torch", "setuptools"}
    assert set(cpu) - set(cuda) == set()
    assert all(k.startswith(("nvidia-", "cuda-")) for k in set(cuda) - set(cpu)), set(cuda) - set(cpu)
    # the script and solci doctor read the lock the same way
    assert variant_pins("cpu") == cpu and variant_pins("cuda") == cuda


def test_every_pin_is_exact_and_covers_the_direct_dependencies() -> None:
    import tomllib

    pins = variant_pins("cpu")
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+]*", v) for v in pins.values()), pins
    deps = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    direct = [*deps["dependencies"], *deps["optional-dependencies"]["dev"]]
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower().replace("_", "-") for d in direct}
    assert names - set(pins) == set()


def test_a_bad_variant_is_refused() -> None:
    res = subprocess.run(["bash", str(SCRIPT), "--variant", "rocm"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "--variant must be cpu or cuda" in res.stderr


def test_the_venv_has_the_locked_versions() -> None:
    wrong = {}
    for name, version in variant_pins("cpu").items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed != version:
            wrong[name] = (installed, version)
    assert not wrong, f"venv differs from constraints.txt (installed, pinned): {wrong}; run ./dev test to resync"


def test_two_stacks_give_two_fingerprints(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import triton

    monkeypatch.setattr("socket.gethostname", lambda: "host-a")
    first = fingerprint(None, "cpu")
    for key in ("torch", "triton", "python", "cuda", "driver"):
        assert key in first
    assert fingerprint(None, "cpu")["fingerprint"] == first["fingerprint"]  # stable for one stack
    monkeypatch.setattr("socket.gethostname", lambda: "host-b")
    assert fingerprint(None, "cpu")["fingerprint"] == first["fingerprint"]  # the host name is not part of it
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    other_torch = fingerprint(None, "cpu")["fingerprint"]
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    other_triton = fingerprint(None, "cpu")["fingerprint"]
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    other_cuda = fingerprint(None, "cpu")["fingerprint"]
    monkeypatch.setattr("platform.python_version_tuple", lambda: ("3", "12", "3"))
    other_python = fingerprint(None, "cpu")["fingerprint"]
    assert len({first["fingerprint"], other_torch, other_triton, other_cuda, other_python}) == 5
    # a Python patch release (Debian's 3.11.2 in the images, 3.11.7 in a venv) measures alike: one series
    monkeypatch.setattr("platform.python_version_tuple", lambda: ("3", "12", "9"))
    assert fingerprint(None, "cpu")["fingerprint"] == other_python


# ------------------------------------------------------------------------------------------------ image
@pytest.mark.slow
def test_image_labels_match_the_lock() -> None:
    needs_image()
    res = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", IMAGE],
        capture_output=True,
        text=True,
        timeout=30,
    )
    import json

    labels = json.loads(res.stdout)
    pins = variant_pins("cpu")
    assert labels["solci.variant"] == "cpu"
    assert labels["solci.torch"] == pins["torch"] and labels["solci.triton"] == pins["triton"]


@pytest.mark.slow
def test_image_has_a_compiler_and_python_headers() -> None:
    needs_image()
    res = run_in_image(
        "sh", "-c", "gcc --version | head -n 1; python -c \"import sysconfig; print(sysconfig.get_paths()['include'])\""
    )
    assert res.returncode == 0, res.stderr
    gcc, include = res.stdout.strip().splitlines()
    assert gcc.startswith("gcc ")
    res = run_in_image("test", "-f", f"{include}/Python.h")
    assert res.returncode == 0, f"{include}/Python.h is missing"


@pytest.mark.slow
def test_image_compiles_and_imports_a_c_extension_as_triton_does() -> None:
    needs_image()
    env = {"TRITON_CACHE_DIR": "/tmp/triton-cache"}
    res = run_in_image("python", "-c", EXTENSION_PROBE, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "twice(21) = 42" in res.stdout and "/tmp/triton-cache/" in res.stdout
    # the failure the issue saw: without a compiler on PATH, Triton's build stops
    res = run_in_image("/opt/venv/bin/python", "-c", EXTENSION_PROBE, env={**env, "PATH": "/opt/venv/bin"})
    assert res.returncode != 0 and "Failed to find C compiler" in res.stderr


# Triton's own CUDA driver module (the file its first GPU launch compiles), built with Triton's _build against
# an empty stand-in libcuda.so.1: on a GPU host the real one is mounted by the NVIDIA container toolkit.
DRIVER_PROBE = r"""
import os, subprocess, tempfile
from pathlib import Path
import triton.backends.nvidia.driver as nv
from triton.runtime.build import _build
stub, out = tempfile.mkdtemp(), tempfile.mkdtemp()
subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "/dev/null", "-o", f"{stub}/libcuda.so.1"], check=True)
src = Path(out) / "cuda_utils.c"
src.write_text(Path(nv.dirname, "driver.c").read_text())
so = _build("cuda_utils", str(src), out, [nv.libdevice_dir, stub], nv.include_dirs, nv.libraries, [])
undefined = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True, text=True).stdout.split()
print("built", os.path.basename(so), "needs", sorted(s for s in undefined if s.startswith("cuModuleLoad")))
"""


@pytest.mark.slow
def test_image_compiles_tritons_cuda_driver_module() -> None:
    needs_image()  # the CPU variant has the same triton wheel as the CUDA one, driver.c included
    res = run_in_image("python", "-c", DRIVER_PROBE)
    assert res.returncode == 0, res.stdout + res.stderr
    # the symbols the real libcuda.so.1 provides at run time, e.g. the one loading a compiled kernel
    assert "built cuda_utils.cpython-311-x86_64-linux-gnu.so needs ['cuModuleLoadData']" in res.stdout


@pytest.mark.slow
def test_image_holds_exactly_the_locked_versions_and_no_source() -> None:
    needs_image()
    res = run_in_image("python", "-m", "pip", "freeze", "--all")
    assert res.returncode == 0, res.stderr
    pins = variant_pins("cpu")
    installed = {}
    for line in res.stdout.splitlines():
        name, _, version = line.partition("==")
        installed[name.lower().replace("_", "-")] = version
    installed.pop("pip")
    unpinned = {k: v for k, v in installed.items() if k not in pins}
    assert not unpinned, f"installed in {IMAGE} but not pinned in constraints.txt: {unpinned}"
    assert {k: v for k, v in installed.items() if pins[k] != v} == {}
    res = run_in_image(
        "sh", "-c", 'id -u; echo "$HOME"; test ! -e /src && ! python -c "import ci" 2>/dev/null && echo clean'
    )
    assert res.stdout.split() == ["10001", "/home/solci", "clean"], res.stdout + res.stderr


@pytest.mark.slow
def test_image_runs_a_triton_kernel_under_the_interpreter() -> None:
    needs_image()
    kernel = (
        "import torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def add_one(x, n, BLOCK: tl.constexpr):\n"
        "    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)\n"
        "x = torch.zeros(100)\n"
        "add_one[(2,)](x, 100, BLOCK=64)\n"
        "print('sum', int(x.sum()))\n"
    )
    res = run_in_image(
        "sh", "-c", 'printf "%s" "$K" > /tmp/k.py && python /tmp/k.py', env={"K": kernel, "TRITON_INTERPRET": "1"}
    )
    assert res.returncode == 0, res.stderr
    assert "sum 100" in res.stdout
