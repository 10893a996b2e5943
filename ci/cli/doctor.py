"""``solci doctor``: check a host the way a user needs before the first push.

    solci doctor [--gpu | --cpu] [--image IMAGE] [--device N]

One line per check, ``ok   <what>``, ``FAIL <what>: <what to do>`` or ``skip <what>: <why>``; exit 0 when
every check the host kind needs passed, 1 otherwise. The host kind is a GPU host when ``nvidia-smi`` is on
PATH or ``/dev/nvidia0`` exists (``--gpu`` / ``--cpu`` say it instead).

Checks: the Docker SDK, an engine that answers, docker-compose, the dependency image of the host kind
(``solci-deps:cuda`` or ``solci-deps:cpu``, built from constraints.txt's pins) and the image the Docker
executor builds on; in a container of that image (network off, as the user ``solci``): the stack's versions,
the C compiler Triton will use (``$CC``, else ``gcc``, else ``clang``: ``triton.runtime.build``), a C extension
compiled against ``Python.h`` and imported the way Triton builds its CUDA driver module; on a CPU host a tiny
Triton kernel under the interpreter. GPU hosts add: the host's GPU and driver (``nvidia-smi``), the NVIDIA
container toolkit, the GPU visible inside a container of the image (a device request, what ``--gpus device=N``
does), and a tiny Triton kernel compiled and run on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci.cli.common import handles_errors

OK, FAIL, SKIP = "ok", "FAIL", "skip"
CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints.txt"
IMAGES = {"gpu": "solci-deps:cuda", "cpu": "solci-deps:cpu"}
VARIANTS = {"gpu": "cuda", "cpu": "cpu"}
SETUP = {"gpu": "docker/ci_setup.sh --gpu", "cpu": "docker/ci_setup.sh --cpu"}
RUNS_BASE_ENV = "SOLCI_BASE_IMAGE_FOR_RUNS"  # what the Docker executor builds on (default solci-deps:latest)
TOOLKIT_TOOLS = ("nvidia-container-runtime-hook", "nvidia-container-cli", "nvidia-ctk", "nvidia-container-runtime")
RESTART_ENGINE = (
    "restart the engine (sudo systemctl restart docker; the one docker/ci_setup.sh started: ./dev down, then "
    "docker/ci_setup.sh --gpu)"
)
TOOLKIT_CONFIGURE = f"`sudo nvidia-ctk runtime configure --runtime=docker`, then {RESTART_ENGINE}"
TOOLKIT_ADVICE = (
    "install the NVIDIA container toolkit (package nvidia-container-toolkit from NVIDIA's repository, see "
    "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), then "
    + TOOLKIT_CONFIGURE
)
PROBE_TIMEOUT_S = 600.0
PROBE_MARK = "SOLCI_PROBE "

# Runs inside the image (python3 of its venv). Written to a file first: @triton.jit reads its source.
PROBE = r'''
import json, os, shutil, subprocess, sys, sysconfig, time

out = {}
EXT = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}
static PyMethodDef methods[] = {{"add", add, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "solci_probe_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_solci_probe_ext(void) { return PyModule_Create(&module); }
"""


def stack():
    import torch, triton
    return {"python": sys.version.split()[0], "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda}


def compiler():
    # the order of triton.runtime.build._build (Triton 3.6): $CC, else gcc, else clang
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("Failed to find C compiler: no $CC, gcc or clang on PATH")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    return {"cc": shutil.which(cc) or cc, "version": version.splitlines()[0]}


def c_extension():
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(header):
        raise RuntimeError(f"{header} is missing (python3-dev)")
    from triton.runtime.build import compile_module_from_src
    module = compile_module_from_src(EXT, "solci_probe_ext")
    assert module.add(2, 3) == 5, "the compiled extension computed a wrong sum"
    return {"python_h": header}


def driver_module():
    # Triton's own CUDA driver module (driver.c: cuda.h from Triton, Python.h), built as its first GPU launch
    # builds it; linked against an empty stand-in libcuda.so.1 (the real one comes with the GPU, at run time)
    import tempfile
    from pathlib import Path
    import triton.backends.nvidia.driver as nv
    from triton.runtime.build import _build
    stub, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    subprocess.run([compiler()["cc"], "-shared", "-fPIC", "-x", "c", "/dev/null", "-o", f"{stub}/libcuda.so.1"],
                   check=True, capture_output=True)
    src = Path(out) / "cuda_utils.c"
    src.write_text(Path(nv.dirname, "driver.c").read_text())
    so = _build("cuda_utils", str(src), out, [nv.libdevice_dir, stub], nv.include_dirs, nv.libraries, [])
    return {"bytes": os.path.getsize(so)}


def kernel(device):
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

    x = torch.arange(1000, dtype=torch.float32, device=device)
    add_one[(triton.cdiv(1000, 256),)](x, 1000, BLOCK=256)
    assert torch.equal(x.cpu(), torch.arange(1000, dtype=torch.float32) + 1), "the kernel computed wrong values"
    return {"device": str(device)}


def gpu():
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "capability": f"{props.major}.{props.minor}", "count": torch.cuda.device_count(),
            "cuda": torch.version.cuda}


STEPS = {"stack": stack, "compiler": compiler, "c_extension": c_extension, "driver_module": driver_module,
         "gpu": gpu, "interpreter_kernel": lambda: kernel("cpu"), "gpu_kernel": lambda: kernel("cuda")}
for name in os.environ["SOLCI_PROBE_STEPS"].split(","):
    t0 = time.monotonic()
    try:
        out[name] = {"ok": True, "value": STEPS[name]()}
    except BaseException as exc:
        out[name] = {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"[-1500:]}
    out[name]["s"] = round(time.monotonic() - t0, 1)
print("SOLCI_PROBE " + json.dumps(out), flush=True)
'''


@dataclass
class Check:
    status: str  # ok | FAIL | skip
    what: str
    note: str = ""  # FAIL: what to do; skip: why

    def line(self) -> str:
        if self.status == OK:
            return f"ok   {self.what}"
        return f"{self.status:<4} {self.what}: {self.note}"


# --------------------------------------------------------------------------------------------- helpers
def host_looks_like_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/dev/nvidia0").exists()


def variant_pins(variant: str, path: Path = CONSTRAINTS) -> dict[str, str]:
    """The exact pins of one image variant in constraints.txt (``#cuda`` lines replace those marked ``# cpu``),
    by lower-case package name; empty when the file is not there (an installed copy of solci)."""
    if not path.is_file():
        return {}
    pins: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("#cuda "):
            if variant != "cuda":
                continue
            spec = raw[len("#cuda ") :].strip()
        else:
            spec = raw.split(" #", 1)[0].strip()
            if not spec or spec.startswith("#") or (variant == "cuda" and re.search(r"#\s*cpu\b", raw)):
                continue
        name, _, version = spec.partition("==")
        pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _same_version(installed: str, pin: str) -> bool:
    """``2.11.0+cu130`` is what the pin ``2.11.0`` installs (PyPI's CUDA build carries a local label)."""
    return installed == pin or ("+" not in pin and installed.split("+", 1)[0] == pin)


def _short(exc: BaseException, limit: int = 300) -> str:
    explanation = getattr(exc, "explanation", None)  # docker.errors.APIError: the engine's own words
    text = " ".join(str(explanation or exc).split())
    return f"{exc.__class__.__name__}: {text[:limit]}"


def _run(cmd: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


class Doctor:
    def __init__(self, mode: str, image: str | None, device: str, echo: Any = print) -> None:
        self.mode = mode
        self.image = image or IMAGES[mode]
        self.device = device
        self.echo = echo
        self.checks: list[Check] = []
        self.client: Any = None
        self.docker: Any = None
        self.image_ok = False
        self.host_cuda: str | None = None  # the CUDA version the host's driver supports (nvidia-smi)
        self.toolkit_ok = False

    def add(self, status: str, what: str, note: str = "") -> Check:
        check = Check(status, what, note)
        self.checks.append(check)
        self.echo(check.line())
        return check

    # ---------------------------------------------------------------------------------------- engine
    def check_sdk(self) -> None:
        try:
            import docker
        except ImportError:
            self.add(FAIL, "Docker SDK for Python", "pip install docker (./dev sets up a venv with it)")
            return
        self.docker = docker
        self.add(OK, f"Docker SDK for Python {getattr(docker, '__version__', '?')}")

    def check_engine(self) -> None:
        if self.docker is None:
            self.add(SKIP, "Docker engine", "needs the Docker SDK")
            return
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        try:
            client = self.docker.from_env(timeout=30)
            client.ping()
            version = client.version().get("Version", "?")
        except Exception as exc:
            advice = "run docker/ci_setup.sh (installs and starts one), or start your engine"
            if "permission denied" in str(exc).lower():
                advice = "add your user to the docker group (sudo usermod -aG docker $USER; log in again), or use sudo"
            self.add(FAIL, f"Docker engine at {where}", f"no answer ({_short(exc, 160)}): {advice}")
            return
        self.client = client
        self.add(OK, f"Docker engine {version} answers at {where}")

    def check_compose(self) -> None:
        for cmd in (["docker-compose", "version", "--short"], ["docker", "compose", "version", "--short"]):
            if shutil.which(cmd[0]) is None:
                continue
            res = _run(cmd)
            if res is not None and res.returncode == 0 and res.stdout.strip():
                self.add(OK, f"{' '.join(cmd[:-2])} {res.stdout.strip()} (docker-compose.yml: file format 2.4)")
                return
        self.add(
            FAIL,
            "docker-compose",
            "install it (apt-get install docker-compose, or Docker's compose plugin): "
            "the runner and dashboard services are started with it",
        )

    # ---------------------------------------------------------------------------------------- images
    def _labels(self, image: Any) -> dict[str, str]:
        return dict((image.attrs.get("Config") or {}).get("Labels") or {})

    def check_image(self) -> None:
        what = f"image {self.image}"
        if self.client is None:
            self.add(SKIP, what, "needs an engine")
            return
        try:
            image = self.client.images.get(self.image)
        except self.docker.errors.ImageNotFound:
            self.add(FAIL, what, f"missing: build it with {SETUP[self.mode]}")
            return
        except Exception as exc:
            self.add(FAIL, what, f"cannot inspect it ({_short(exc)})")
            return
        self.image_ok = True
        labels = self._labels(image)
        variant = labels.get("solci.variant", "")
        torch, triton = labels.get("solci.torch", "?"), labels.get("solci.triton", "?")
        want = VARIANTS[self.mode]
        if variant != want:
            kind = f"the {variant} variant" if variant else "not built by docker/build_base_image.sh"
            self.add(
                FAIL,
                what,
                f"{kind} (torch {torch}), not the {want} variant a {self.mode} host measures "
                f"with: build solci-deps:{want} with {SETUP[self.mode]}",
            )
            return
        pins = variant_pins(variant)
        stale = [
            f"{k} {labels.get('solci.' + k)} (constraints.txt: {pins[k]})"
            for k in ("torch", "triton")
            if k in pins and labels.get("solci." + k) != pins[k]
        ]
        if stale:
            self.add(FAIL, what, f"built from other pins: {', '.join(stale)}: rebuild with {SETUP[self.mode]}")
            return
        self.add(
            OK,
            f"{what}: variant {variant}, torch {torch}, triton {triton}"
            + (" (the pins of constraints.txt)" if pins else ""),
        )

    def check_runs_base(self) -> None:
        base = os.environ.get(RUNS_BASE_ENV) or "solci-deps:latest"
        what = f"the Docker executor's base image {base}"
        if not self.image_ok:
            self.add(SKIP, what, f"needs {self.image}")
            return
        try:
            got = self.client.images.get(base)
            want = self.client.images.get(self.image)
        except Exception:
            self.add(FAIL, what, f"missing: {SETUP[self.mode]} tags it (or set ${RUNS_BASE_ENV}={self.image})")
            return
        if got.id != want.id:
            variant = self._labels(got).get("solci.variant") or "another image"
            self.add(
                FAIL,
                what,
                f"is {variant}, not {self.image}: {SETUP[self.mode]} moves solci-deps:latest "
                f"(or set ${RUNS_BASE_ENV}={self.image})",
            )
            return
        self.add(OK, f"{what} is {self.image}")

    # ---------------------------------------------------------------------------------------- GPU host
    def check_host_gpu(self) -> None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.add(FAIL, "host GPU", "nvidia-smi is not on PATH: install the NVIDIA driver (and its utilities)")
            return
        res = _run([smi, "--query-gpu=index,name,driver_version", "--format=csv,noheader"])
        if res is None or res.returncode != 0 or not res.stdout.strip():
            why = (res.stdout + res.stderr).strip().splitlines()[:1] if res else ["did not answer"]
            self.add(FAIL, "host GPU", f"nvidia-smi failed ({' '.join(why)[:200]}): install or repair the driver")
            return
        gpus = [line.strip() for line in res.stdout.strip().splitlines()]
        header = _run([smi])
        if header is not None:
            m = re.search(r"CUDA Version:\s*([\d.]+)", header.stdout)
            self.host_cuda = m.group(1) if m else None
        cuda = f", driver supports CUDA {self.host_cuda}" if self.host_cuda else ""
        self.add(OK, f"host GPU {gpus[0]}{cuda}" + (f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""))

    def check_toolkit(self) -> None:
        found = [tool for tool in TOOLKIT_TOOLS if shutil.which(tool)]
        runtimes: list[str] = []
        if self.client is not None:
            try:
                runtimes = sorted((self.client.info().get("Runtimes") or {}).keys())
            except Exception:
                runtimes = []
        if "nvidia" in runtimes:
            found.append("runtime nvidia in `docker info`")
        if found:
            self.toolkit_ok = True
            self.add(OK, f"NVIDIA container toolkit: {', '.join(found)}")
            return
        self.add(
            FAIL,
            "NVIDIA container toolkit",
            f"not found (no {' / '.join(TOOLKIT_TOOLS[:3])} on PATH, `docker info` runtimes: "
            f"{', '.join(runtimes) or '?'}): {TOOLKIT_ADVICE}",
        )

    # ---------------------------------------------------------------------------------------- probes
    def probe(self, steps: list[str], *, gpu: bool) -> tuple[dict[str, Any] | None, str]:
        """Run PROBE in a fresh container of the image; (results by step, "") or (None, why)."""
        env = {"SOLCI_PROBE_STEPS": ",".join(steps), "SOLCI_PROBE": PROBE, "TRITON_CACHE_DIR": "/tmp/triton-cache"}
        if not gpu:
            env["TRITON_INTERPRET"] = "1"
        requests = None
        if gpu:
            requests = [self.docker.types.DeviceRequest(device_ids=[self.device], capabilities=[["gpu"]])]
        cmd = ["sh", "-c", 'printf "%s" "$SOLCI_PROBE" >/tmp/solci_probe.py && exec python /tmp/solci_probe.py']
        container = None
        try:
            # create, then start: a container the engine cannot start (no GPU driver) is removed as well
            container = self.client.containers.create(
                self.image,
                cmd,
                network_mode="none",
                user="solci",
                environment=env,
                device_requests=requests,
                labels={"solci.doctor": "1"},
            )
            container.start()
            try:
                status = container.wait(timeout=PROBE_TIMEOUT_S)
            except Exception as exc:
                return None, f"no result within {PROBE_TIMEOUT_S:.0f} s ({_short(exc, 120)})"
            log = container.logs(stdout=True, stderr=True).decode(errors="replace")
        except Exception as exc:
            return None, _short(exc)
        finally:
            if container is not None:
                try:
                    container.remove(force=True)
                except Exception:
                    pass
        for line in log.splitlines():
            if line.startswith(PROBE_MARK):
                return json.loads(line[len(PROBE_MARK) :]), ""
        tail = " | ".join(log.strip().splitlines()[-4:])
        return None, f"exit status {status.get('StatusCode')}: {tail[-400:] or '(no output)'}"

    def check_in_image(self) -> None:
        steps = ["stack", "compiler", "c_extension"]
        steps.append("interpreter_kernel" if self.mode == "cpu" else "driver_module")
        whats = {
            "stack": f"stack in {self.image}",
            "compiler": f"C compiler Triton uses in {self.image}",
            "c_extension": f"a C extension against Python.h compiles and imports in {self.image} "
            "(triton.runtime.build, as Triton builds its CUDA driver module)",
            "interpreter_kernel": f"a Triton kernel runs under the interpreter in {self.image}",
            "driver_module": f"Triton's CUDA driver module (driver.c) compiles in {self.image} (against a stand-in "
            "libcuda.so.1: the real one comes with the GPU)",
        }
        if not self.image_ok:
            for step in steps:
                self.add(SKIP, whats[step], f"needs {self.image}")
            return
        results, why = self.probe(steps, gpu=False)
        if results is None:
            self.add(FAIL, f"a container of {self.image}", f"{why}: rebuild it with {SETUP[self.mode]} (FORCE=1)")
            for step in steps[1:]:
                self.add(SKIP, whats[step], "the container did not run")
            return
        rebuild = f"rebuild the image with {SETUP[self.mode]} (FORCE=1 docker/build_base_image.sh ...)"
        for step in steps:
            res = results.get(step) or {"ok": False, "error": "no result"}
            if not res["ok"]:
                advice = {
                    "compiler": f"{res['error']}: {rebuild}; its recipe installs gcc",
                    "c_extension": f"{res['error']}: {rebuild}; its recipe installs gcc, libc6-dev and python3-dev",
                }.get(step, f"{res['error']}: {rebuild}")
                self.add(FAIL, whats[step], advice)
                continue
            value = res["value"]
            if step == "stack":
                self.check_stack(whats[step], value)
            elif step == "compiler":
                self.add(OK, f"{whats[step]}: {value['cc']} ({value['version']})")
            else:
                self.add(OK, f"{whats[step]} ({res['s']:.1f} s)")

    def check_stack(self, what: str, value: dict[str, Any]) -> None:
        cuda = value["cuda"] or "none"
        text = f"python {value['python']}, torch {value['torch']} (CUDA {cuda}), triton {value['triton']}"
        pins = variant_pins(VARIANTS[self.mode])
        stale = [
            f"{k} {value[k]} (constraints.txt: {pins[k]})"
            for k in ("torch", "triton")
            if k in pins and not _same_version(value[k], pins[k])
        ]
        if self.mode == "gpu" and not value["cuda"]:
            self.add(
                FAIL, what, f"{text}: torch's CPU build cannot use the GPU: build solci-deps:cuda with {SETUP['gpu']}"
            )
        elif stale:
            self.add(FAIL, what, f"{', '.join(stale)}: rebuild the image with {SETUP[self.mode]} --force")
        elif self.mode == "gpu" and self.host_cuda and _version(value["cuda"]) > _version(self.host_cuda):
            self.add(
                FAIL,
                what,
                f"{text}: torch needs CUDA {value['cuda']} but the host's driver supports CUDA "
                f"{self.host_cuda}: update the driver (CUDA 13.0 needs >= 580)",
            )
        else:
            self.add(OK, f"{what}: {text}")

    def check_gpu_in_container(self) -> None:
        what_gpu = f"GPU {self.device} visible inside a container of {self.image}"
        what_kernel = f"a Triton kernel compiles and runs on the GPU in {self.image}"
        if not self.image_ok:
            self.add(SKIP, what_gpu, f"needs {self.image}")
            self.add(SKIP, what_kernel, f"needs {self.image}")
            return
        results, why = self.probe(["gpu", "gpu_kernel"], gpu=True)
        if results is None:
            advice = TOOLKIT_CONFIGURE if self.toolkit_ok else "install the NVIDIA container toolkit (see above)"
            self.add(FAIL, what_gpu, f"the engine could not start it ({why}): {advice}")
            self.add(SKIP, what_kernel, "needs the GPU inside a container")
            return
        gpu = results["gpu"]
        if not gpu["ok"]:
            advice = f"{gpu['error']}: try `docker run --rm --gpus device={self.device} {self.image} nvidia-smi`"
            if self.host_cuda:
                advice += f"; the host's driver supports CUDA {self.host_cuda}: torch's CUDA must not be newer"
            self.add(FAIL, what_gpu, advice)
            self.add(SKIP, what_kernel, "needs the GPU inside a container")
            return
        value = gpu["value"]
        self.add(OK, f"{what_gpu}: {value['name']} (compute {value['capability']}, torch CUDA {value['cuda']})")
        kernel = results["gpu_kernel"]
        if kernel["ok"]:
            self.add(OK, f"{what_kernel} ({kernel['s']:.1f} s, including the driver module's first build)")
        else:
            self.add(
                FAIL,
                what_kernel,
                f"{kernel['error']}: run `solci doctor` again after fixing the lines above; "
                "if it persists, rebuild the image with docker/ci_setup.sh --gpu --force",
            )

    # ---------------------------------------------------------------------------------------- all
    def run(self) -> int:
        self.echo(f"solci doctor: a {self.mode} host (image {self.image})")
        self.check_sdk()
        self.check_engine()
        self.check_compose()
        self.check_image()
        self.check_runs_base()
        if self.mode == "gpu":
            self.check_host_gpu()
            self.check_toolkit()
        self.check_in_image()
        if self.mode == "gpu":
            self.check_gpu_in_container()
        failed = [c for c in self.checks if c.status == FAIL]
        if failed:
            self.echo(
                f"solci doctor: {len(failed)} of {len(self.checks)} checks failed: fix the FAIL lines, "
                "then run solci doctor again"
            )
            return 1
        self.echo(f"solci doctor: all {len(self.checks)} checks passed; this host is ready to measure")
        return 0


@handles_errors
def cmd_doctor(args: argparse.Namespace) -> int:
    mode = "gpu" if args.gpu else "cpu" if args.cpu else ("gpu" if host_looks_like_gpu() else "cpu")
    if not re.fullmatch(r"\d+", args.device):
        raise ValueError(f"--device: expected a GPU index such as 0, got {args.device!r}")

    def echo(line: str) -> None:
        print(line, flush=True)

    return Doctor(mode, args.image, args.device, echo=echo).run()


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check this host before the first push: engine, images, GPU toolkit, compiler, Triton",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--gpu", action="store_true", help="check a GPU host (default when nvidia-smi is there)")
    kind.add_argument("--cpu", action="store_true", help="check a host without a GPU")
    p.add_argument("--image", help="dependency image to check (default solci-deps:cuda, or solci-deps:cpu)")
    p.add_argument("--device", default="0", help="GPU index for the container checks (default 0)")
    p.set_defaults(func=cmd_doctor)
