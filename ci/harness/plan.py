"""The launch plan: one recorded call of a commit's kernel, the document the recording process writes and the
replay process runs (``ci.harness.record`` writes it, ``ci.harness.replay`` runs it; docs/replay.md).

A plan is a folder: ``plan.json`` (version ``PLAN_VERSION``) and one binary (a cubin) per compiled kernel. It
holds the kernels with what Triton's launcher needs of each (name, warps, CTAs, shared memory, scratch sizes,
the argument signature, the tensor-descriptor metadata) and the launches in order, each argument described
symbolically: a pointer as (role, index, byte offset) of a buffer the harness allocates itself (``input`` k,
``output`` k or ``scratch`` k with its size), a tensor descriptor as its buffer plus shape, strides and padding,
a scalar by value. ``load`` believes nothing of it before ``validate``: known keys and roles only, a closed
vocabulary of signature types (the only text that reaches Triton's generated launcher), sizes and counts
capped, grids and shared memory within the device's limits, every buffer reach inside its buffer.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS
from storage.result import UNREPLAYABLE as UNREPLAYABLE  # a case error's prefix when a kernel cannot be replayed

PLAN_VERSION = 1
PLAN_FILE = "plan.json"

MAX_PLAN_BYTES = 1 << 20
MAX_BINARY_BYTES = 32 << 20
MAX_KERNELS = 16
MAX_LAUNCHES = 64
MAX_ARGS = 256
MAX_CONFIG_KEYS = 32
SCRATCH_FACTOR = 4  # scratch (the kernel's own buffers and Triton's global scratch) <= this many times the outputs
ROLES = ("input", "output", "scratch")
INPUT_NAMES = ("grad_output", "reshaped", "weight")
OUTPUT_NAMES = ("grad_attn_output", "grad_weight")

ELEM_BYTES = {
    "i1": 1,
    "i8": 1,
    "u1": 1,
    "u8": 1,
    "fp8e4nv": 1,
    "fp8e5": 1,
    "fp8e4b15": 1,
    "i16": 2,
    "u16": 2,
    "fp16": 2,
    "bf16": 2,
    "i32": 4,
    "u32": 4,
    "fp32": 4,
    "f32": 4,
    "i64": 8,
    "u64": 8,
    "fp64": 8,
}
INT_RANGES = {
    "i1": (0, 1),
    "u1": (0, 1),
    "i8": (-(2**7), 2**7 - 1),
    "u8": (0, 2**8 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "u16": (0, 2**16 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "u32": (0, 2**32 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u64": (0, 2**64 - 1),
}
FLOAT_TYPES = ("fp16", "bf16", "fp32", "f32", "fp64")
# Triton's device-side TMA element type codes (tensordesc_meta's elem_type; the pinned Triton's
# TMA_DTYPE_DEVICE_TO_HOST maps them to CUtensorMapDataType). A dtype not listed has no TMA descriptor here.
TMA_ELEM_TYPE = {
    "u8": 0,
    "i8": 0,
    "fp8e4nv": 0,
    "fp8e5": 0,
    "fp8e4b15": 0,
    "u16": 1,
    "i16": 1,
    "u32": 2,
    "i32": 3,
    "u64": 4,
    "i64": 5,
    "fp16": 6,
    "fp32": 7,
    "f32": 7,
    "fp64": 9,
    "bf16": 10,
}
_DTYPES = "|".join(sorted(ELEM_BYTES, key=len, reverse=True))
_POINTER = re.compile(rf"^\*k?({_DTYPES})$")
# A Gluon descriptor's type also names its shared-memory layout (the launcher reads only the dtype and block;
# the layout is refused unless it is the plain NVMMA one of the dtype and rank, without a CTA layout).
_TENSORDESC = re.compile(
    rf"^tensordesc<({_DTYPES})\[([1-9][0-9]{{0,3}}(?:, [1-9][0-9]{{0,3}}){{0,4}})\]"
    r"(?:,NVMMASharedLayout\(swizzle_byte_width=(0|32|64|128), element_bitwidth=(8|16|32), rank=([1-5]), "
    r"transposed=(?:True|False), fp4_padded=False, cga_layout=\[\]\))?>$"
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_BINARY = re.compile(r"^k[0-9]{1,2}\.bin$")
_CONFIG_TEXT = re.compile(r"^[A-Za-z0-9_.:+-]{0,64}$")


class RefusedPlan(ValueError):
    """A recording that cannot be replayed, or a plan that does not follow the contract; the message says why."""


@dataclass(frozen=True)
class Limits:
    """What the device allows: its compute capability as Triton's arch number (90), the shared memory a block
    may opt into and the threads of a block."""

    arch: int
    max_shared: int
    max_threads: int = 1024


@dataclass(frozen=True)
class Kernel:
    """One compiled kernel: its binary and what Triton's launcher and loader read of its metadata."""

    name: str
    binary: bytes = field(repr=False)
    num_warps: int
    num_ctas: int
    shared: int
    signature: tuple[tuple[str, str], ...]
    tensordesc_meta: tuple[dict, ...] | None = None
    cluster_dims: tuple[int, int, int] = (1, 1, 1)
    global_scratch_size: int = 0
    global_scratch_align: int = 1
    profile_scratch_size: int = 0
    profile_scratch_align: int = 1
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    arch: int = 90

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.binary).hexdigest()


@dataclass(frozen=True)
class Arg:
    """One argument of a launch: ``kind`` is ptr, desc, null, scalar or constexpr."""

    kind: str
    role: str | None = None
    index: int | None = None
    offset: int = 0
    shape: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    padding: str | None = None
    value: int | float | bool | None = None

    def as_dict(self) -> dict[str, Any]:
        keep = {
            "ptr": ("role", "index", "offset"),
            "desc": ("role", "index", "offset", "shape", "strides", "padding"),
            "scalar": ("value",),
        }.get(self.kind, ())
        d: dict[str, Any] = {"kind": self.kind}
        for k in keep:
            v = getattr(self, k)
            d[k] = list(v) if isinstance(v, tuple) else v
        return d


@dataclass(frozen=True)
class Launch:
    kernel: int
    grid: tuple[int, int, int]
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Plan:
    batch_size: int
    seq_len: int
    kernels: tuple[Kernel, ...]
    launches: tuple[Launch, ...]
    scratch: tuple[int, ...] = ()  # bytes of each scratch buffer
    config: dict | None = None  # the kernel's own description of its configuration (shown, never used)
    recorded: dict = field(default_factory=dict)  # how the recording went (calls, GPU work checked)

    def steady_key(self) -> tuple:
        """What must be equal between two calls for the launch sequence to be steady."""
        return (
            tuple((k.sha256, k.name, k.num_warps, k.num_ctas, k.shared, k.signature) for k in self.kernels),
            self.launches,
            self.scratch,
        )


# ------------------------------------------------------------------------------------------------ buffers
def buffer_bytes(batch_size: int, seq_len: int) -> dict[tuple[str, int], int]:
    """Bytes of the harness's buffers of a case (bf16): inputs grad_output, reshaped, weight; outputs
    grad_attn_output (B, 32, S, 64), grad_weight (2048, 2048)."""
    m = batch_size * seq_len
    return {
        ("input", 0): m * HIDDEN * 2,
        ("input", 1): m * HIDDEN * 2,
        ("input", 2): HIDDEN * HIDDEN * 2,
        ("output", 0): batch_size * NUM_HEADS * seq_len * HEAD_DIM * 2,
        ("output", 1): HIDDEN * HIDDEN * 2,
    }


def scratch_cap(batch_size: int, seq_len: int) -> int:
    sizes = buffer_bytes(batch_size, seq_len)
    return SCRATCH_FACTOR * (sizes[("output", 0)] + sizes[("output", 1)])


# ------------------------------------------------------------------------------------------------ writing
def to_json(plan: Plan) -> dict[str, Any]:
    kernels = []
    for i, k in enumerate(plan.kernels):
        d = asdict(k)
        d.pop("binary")
        d["binary"] = f"k{i}.bin"
        d["sha256"] = k.sha256
        d["signature"] = [list(p) for p in k.signature]
        d["cluster_dims"] = list(k.cluster_dims)
        d["tensordesc_meta"] = None if k.tensordesc_meta is None else [dict(m) for m in k.tensordesc_meta]
        kernels.append(d)
    return {
        "plan_version": PLAN_VERSION,
        "batch_size": plan.batch_size,
        "seq_len": plan.seq_len,
        "scratch": list(plan.scratch),
        "kernels": kernels,
        "launches": [
            {"kernel": ln.kernel, "grid": list(ln.grid), "args": [a.as_dict() for a in ln.args]} for ln in plan.launches
        ],
        "config": plan.config,
        "recorded": plan.recorded,
    }


def write(plan: Plan, folder: Path) -> Path:
    """Write ``plan`` into ``folder`` (plan.json and the binaries); returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, k in enumerate(plan.kernels):
        (folder / f"k{i}.bin").write_bytes(k.binary)
    (folder / PLAN_FILE).write_text(json.dumps(to_json(plan), allow_nan=False), encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------------ reading
def open_folder(path: Path, base: int | None = None) -> int:
    """A descriptor of the folder ``path`` whose every component is a real folder (no symbolic link followed):
    what the recording process left in its scratch cannot point the reader elsewhere. With ``base`` (a folder's
    descriptor), ``path`` is relative to it."""
    if base is not None:
        parts = ("", *path.parts)
        fd = os.dup(base)
    else:
        parts = path.resolve(strict=False).parts if not path.is_absolute() else path.parts
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[1:]:
            if part in ("..", "."):
                raise OSError(0, "not a plain path")
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        raise RefusedPlan(f"folder {path}: {exc.strerror} (or a symbolic link)") from None
    return fd


def read_file(path: Path, cap: int, dir_fd: int | None = None) -> bytes:
    """A regular file's bytes (no symbolic link followed), at most ``cap``; RefusedPlan otherwise. With
    ``dir_fd`` (``open_folder``), ``path``'s name is opened in that folder."""
    try:
        if dir_fd is None:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        else:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        raise RefusedPlan(f"file {path.name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedPlan(f"file {path.name}: not a regular file")
        if st.st_size > cap:
            raise RefusedPlan(f"file {path.name}: {st.st_size} bytes (at most {cap})")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise RefusedPlan(f"file {path.name}: more than {cap} bytes")
    return data


def load(folder: Path, batch_size: int, seq_len: int, limits: Limits) -> Plan:
    """Read and validate the plan in ``folder`` for the case (batch_size, seq_len) on a device with ``limits``."""
    raw = read_file(folder / PLAN_FILE, MAX_PLAN_BYTES)
    doc = _parse(raw)
    binaries = {name: read_file(folder / name, MAX_BINARY_BYTES) for name in _binary_names(doc)}
    return validate(doc, binaries, batch_size, seq_len, limits)


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RefusedPlan(f"plan.json: not JSON ({str(exc)[:120]})") from None


def _binary_names(doc: Any) -> list[str]:
    """The binary files a plan document names (well-formed names only, each once, within the kernel cap)."""
    kernels = doc.get("kernels") if isinstance(doc, dict) else None
    kernels = kernels[:MAX_KERNELS] if isinstance(kernels, list) else []
    names = (k.get("binary") for k in kernels if isinstance(k, dict))
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and _BINARY.match(n)))


def collect(src: Path, dst: Path, base: int | None = None) -> None:
    """Copy the plan in ``src`` (written by the recording process; relative to the folder ``base`` when given) to
    ``dst``: plan.json and the binaries it names, regular files only, each within its cap; what the judge then
    validates cannot change under it."""
    folder = open_folder(src, base)
    try:
        raw = read_file(src / PLAN_FILE, MAX_PLAN_BYTES, folder)
        doc = _parse(raw)
        dst.mkdir(parents=True, exist_ok=True)
        for name in _binary_names(doc):
            (dst / name).write_bytes(read_file(src / name, MAX_BINARY_BYTES, folder))
        (dst / PLAN_FILE).write_bytes(raw)
    finally:
        os.close(folder)


def round_bytes(batch_size: int, seq_len: int) -> int:
    """Bytes of one interpreter round's file: both outputs, then the three inputs as the kernel left them."""
    return sum(buffer_bytes(batch_size, seq_len).values())


def collect_rounds(src: Path, dst: Path, rounds: int, batch_size: int, seq_len: int, base: int | None = None) -> None:
    """Copy the interpreter's round files (``round<r>.bin``, each exactly ``round_bytes``) that exist."""
    dst.mkdir(parents=True, exist_ok=True)
    want = round_bytes(batch_size, seq_len)
    try:
        folder = open_folder(src, base)
    except RefusedPlan:
        return  # the judge says the outputs are missing
    try:
        for r in range(rounds):
            try:
                data = read_file(src / f"round{r}.bin", want, folder)
            except RefusedPlan:
                return  # the judge says a round's outputs are missing
            (dst / f"round{r}.bin").write_bytes(data)
    finally:
        os.close(folder)


def config_of(value: Any) -> dict | None:
    """A kernel's description of its configuration, validated as a plan's ``config`` is."""
    return _config(value, "config")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _int(v: Any, where: str, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise RefusedPlan(f"{where}: {str(v)[:40]!r} is not an integer in [{lo}, {hi}]")
    return v


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise RefusedPlan(f"{where}: expected true or false")
    return v


def _keys(d: Any, where: str, required: set[str], optional: set[str] = frozenset()) -> dict:
    if not isinstance(d, dict):
        raise RefusedPlan(f"{where}: expected an object")
    unknown = set(d) - required - optional
    if unknown:
        raise RefusedPlan(f"{where}: unknown key {sorted(unknown)[0][:40]!r}")
    missing = required - set(d)
    if missing:
        raise RefusedPlan(f"{where}: missing {sorted(missing)[0]!r}")
    return d


def _list(v: Any, where: str, n_max: int, n_min: int = 0) -> list:
    if not isinstance(v, list) or not n_min <= len(v) <= n_max:
        raise RefusedPlan(f"{where}: expected a list of {n_min} to {n_max} items")
    return v


def signature_type(ty: Any, where: str) -> str:
    """One signature type from the closed vocabulary (pointer, scalar, constexpr, tensor descriptor)."""
    if not isinstance(ty, str) or len(ty) > 200:
        raise RefusedPlan(f"{where}: not a signature type")
    if ty == "constexpr" or ty in INT_RANGES or ty in FLOAT_TYPES or _POINTER.match(ty):
        return ty
    m = _TENSORDESC.match(ty)
    if m is not None:
        dtype, block, bits, rank = m.group(1), m.group(2), m.group(4), m.group(5)
        if bits is not None and (int(bits) != 8 * ELEM_BYTES[dtype] or int(rank) != block.count(",") + 1):
            raise RefusedPlan(f"{where}: a descriptor layout of another dtype or rank than its block")
        return ty
    raise RefusedPlan(f"{where}: signature type {ty[:40]!r} is not one the replay knows")


def desc_block(ty: str) -> tuple[str, tuple[int, ...]]:
    """(dtype, block shape) of a ``tensordesc<dtype[b0, b1, ...]>`` type."""
    m = _TENSORDESC.match(ty)
    assert m is not None
    return m.group(1), tuple(int(x) for x in m.group(2).split(", "))


_KERNEL_KEYS = {
    "name",
    "binary",
    "sha256",
    "num_warps",
    "num_ctas",
    "shared",
    "signature",
    "tensordesc_meta",
    "cluster_dims",
    "global_scratch_size",
    "global_scratch_align",
    "profile_scratch_size",
    "profile_scratch_align",
    "launch_cooperative_grid",
    "launch_pdl",
    "arch",
}
_META_KEYS = {"swizzle", "elem_size", "elem_type", "block_size", "fp4_padded"}


def _kernel(d: Any, where: str, binaries: dict[str, bytes], limits: Limits, cap: int) -> Kernel:
    d = _keys(d, where, _KERNEL_KEYS)
    name = d["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise RefusedPlan(f"{where}.name: not a kernel name")
    fname = d["binary"]
    if not isinstance(fname, str) or fname not in binaries:
        raise RefusedPlan(f"{where}.binary: no such binary in the plan")
    binary = binaries[fname]
    if not binary.startswith(b"\x7fELF"):
        raise RefusedPlan(f"{where}.binary: not a cubin (ELF)")
    if d["sha256"] != hashlib.sha256(binary).hexdigest():
        raise RefusedPlan(f"{where}.sha256: does not match the binary")
    arch = _int(d["arch"], f"{where}.arch", 0, 10_000)
    if arch != limits.arch:
        raise RefusedPlan(f"{where}.arch: compiled for sm_{arch}, the device is sm_{limits.arch}")
    # any count the device allows: a warp-specialised kernel has e.g. 12 (three warpgroups)
    num_warps = _int(d["num_warps"], f"{where}.num_warps", 1, limits.max_threads // 32)
    num_ctas = _int(d["num_ctas"], f"{where}.num_ctas", 1, 16)
    shared = _int(d["shared"], f"{where}.shared", 0, limits.max_shared)
    sig_list = _list(d["signature"], f"{where}.signature", MAX_ARGS)
    signature = []
    names = set()
    for j, pair in enumerate(sig_list):
        pw = f"{where}.signature[{j}]"
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and _NAME.match(pair[0])):
            raise RefusedPlan(f"{pw}: expected [argument name, type]")
        if pair[0] in names:
            raise RefusedPlan(f"{pw}: argument {pair[0]!r} twice")
        names.add(pair[0])
        signature.append((pair[0], signature_type(pair[1], pw)))
    n_desc = sum(ty.startswith("tensordesc") for _, ty in signature)
    meta: tuple[dict, ...] | None = None
    if d["tensordesc_meta"] is not None:
        items = _list(d["tensordesc_meta"], f"{where}.tensordesc_meta", MAX_ARGS)
        if len(items) != n_desc:
            raise RefusedPlan(f"{where}.tensordesc_meta: {len(items)} entries for {n_desc} descriptors")
        out = []
        descs = [ty for _, ty in signature if ty.startswith("tensordesc")]
        for j, m in enumerate(items):
            mw = f"{where}.tensordesc_meta[{j}]"
            m = _keys(m, mw, _META_KEYS)
            block = _list(m["block_size"], f"{mw}.block_size", 5, 1)
            dtype, rank = desc_block(descs[j])[0], len(desc_block(descs[j])[1])
            # The TMA descriptor is encoded from this metadata: it must describe the signature's dtype and rank,
            # so the reach validated for the descriptor argument is the reach of the descriptor made.
            if (m["elem_size"], m["elem_type"]) != (ELEM_BYTES[dtype], TMA_ELEM_TYPE.get(dtype)):
                raise RefusedPlan(f"{mw}: element size/type {m['elem_size']}/{m['elem_type']} are not {dtype}'s")
            if m["fp4_padded"] is not False or len(block) != rank:
                raise RefusedPlan(f"{mw}: fp4 padding or a block of another rank than the descriptor's ({rank})")
            out.append(
                {
                    "swizzle": _int(m["swizzle"], f"{mw}.swizzle", 0, 3),
                    "elem_size": _int(m["elem_size"], f"{mw}.elem_size", 1, 8),
                    "elem_type": _int(m["elem_type"], f"{mw}.elem_type", 0, 15),
                    "block_size": [_int(b, f"{mw}.block_size", 1, 256) for b in block],
                    "fp4_padded": _bool(m["fp4_padded"], f"{mw}.fp4_padded"),
                }
            )
        meta = tuple(out)
    cluster = _list(d["cluster_dims"], f"{where}.cluster_dims", 3, 3)
    gs_align = _int(d["global_scratch_align"], f"{where}.global_scratch_align", 1, 4096)
    ps_align = _int(d["profile_scratch_align"], f"{where}.profile_scratch_align", 1, 4096)
    return Kernel(
        name=name,
        binary=binary,
        num_warps=num_warps,
        num_ctas=num_ctas,
        shared=shared,
        signature=tuple(signature),
        tensordesc_meta=meta,
        cluster_dims=tuple(_int(c, f"{where}.cluster_dims", 1, 16) for c in cluster),  # type: ignore[arg-type]
        global_scratch_size=_int(d["global_scratch_size"], f"{where}.global_scratch_size", 0, cap),
        global_scratch_align=gs_align,
        profile_scratch_size=_int(d["profile_scratch_size"], f"{where}.profile_scratch_size", 0, 0),
        profile_scratch_align=ps_align,
        launch_cooperative_grid=_bool(d["launch_cooperative_grid"], f"{where}.launch_cooperative_grid"),
        launch_pdl=_bool(d["launch_pdl"], f"{where}.launch_pdl"),
        arch=arch,
    )


def _buffer(a: dict, where: str, sizes: dict[tuple[str, int], int]) -> tuple[str, int, int]:
    role = a["role"]
    if role not in ROLES:
        raise RefusedPlan(f"{where}.role: {str(role)[:20]!r} is not a known buffer role")
    index = _int(a["index"], f"{where}.index", 0, 1 << 10)
    if (role, index) not in sizes:
        raise RefusedPlan(f"{where}: there is no buffer {role} {index}")
    size = sizes[(role, index)]
    offset = _int(a["offset"], f"{where}.offset", 0, max(size - 1, 0))
    return role, index, offset


def _arg(a: Any, ty: str, where: str, sizes: dict[tuple[str, int], int]) -> Arg:
    if not isinstance(a, dict) or a.get("kind") not in ("ptr", "desc", "null", "scalar", "constexpr"):
        raise RefusedPlan(f"{where}: expected an argument of kind ptr, desc, null, scalar or constexpr")
    kind = a["kind"]
    if ty == "constexpr":
        if kind != "constexpr":
            raise RefusedPlan(f"{where}: a constexpr parameter given a {kind}")
        _keys(a, where, {"kind"})
        return Arg("constexpr")
    if ty.startswith("*"):
        if kind == "null":
            _keys(a, where, {"kind"})
            return Arg("null")
        if kind != "ptr":
            raise RefusedPlan(f"{where}: a pointer parameter ({ty}) given a {kind}")
        _keys(a, where, {"kind", "role", "index", "offset"})
        role, index, offset = _buffer(a, where, sizes)
        return Arg("ptr", role, index, offset)
    if ty.startswith("tensordesc"):
        if kind != "desc":
            raise RefusedPlan(f"{where}: a tensor descriptor parameter given a {kind}")
        _keys(a, where, {"kind", "role", "index", "offset", "shape", "strides", "padding"})
        role, index, offset = _buffer(a, where, sizes)
        dtype, block = desc_block(ty)
        shape = tuple(_int(x, f"{where}.shape", 1, 2**31 - 1) for x in _list(a["shape"], f"{where}.shape", 5, 1))
        strides = tuple(_int(x, f"{where}.strides", 0, 2**40) for x in _list(a["strides"], f"{where}.strides", 5, 1))
        if len(shape) != len(block) or len(strides) != len(block):
            raise RefusedPlan(f"{where}: a rank-{len(block)} descriptor given shape {list(shape)[:5]}")
        if strides[-1] != 1:
            raise RefusedPlan(f"{where}.strides: the last dimension must be contiguous")
        if a["padding"] not in ("zero", "nan"):
            raise RefusedPlan(f"{where}.padding: must be zero or nan")
        elem = ELEM_BYTES[dtype]
        reach = (sum((n - 1) * st for n, st in zip(shape, strides, strict=True)) + 1) * elem
        if offset % 16 or any((st * elem) % 16 for st in strides[:-1]):
            raise RefusedPlan(f"{where}: a descriptor's base and strides must be 16-byte aligned")
        if offset + reach > sizes[(role, index)]:
            raise RefusedPlan(
                f"{where}: the descriptor reaches {offset + reach} bytes into {role} {index} "
                f"of {sizes[(role, index)]} bytes"
            )
        return Arg("desc", role, index, offset, shape, strides, a["padding"])
    # a scalar
    if kind != "scalar":
        raise RefusedPlan(f"{where}: a scalar parameter ({ty}) given a {kind}")
    _keys(a, where, {"kind", "value"})
    v = a["value"]
    if ty in INT_RANGES:
        lo, hi = INT_RANGES[ty]
        if isinstance(v, bool):
            v = int(v)
        return Arg("scalar", value=_int(v, f"{where}.value", lo, hi))
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise RefusedPlan(f"{where}.value: expected a finite number for {ty}")
    return Arg("scalar", value=float(v))


def _config(v: Any, where: str) -> dict | None:
    if v is None:
        return None
    if not isinstance(v, dict) or len(v) > MAX_CONFIG_KEYS:
        raise RefusedPlan(f"{where}: expected an object of at most {MAX_CONFIG_KEYS} keys")
    out: dict[str, Any] = {}
    for k, x in v.items():
        if not isinstance(k, str) or not _NAME.match(k):
            raise RefusedPlan(f"{where}: key {str(k)[:40]!r} is not a name")
        if isinstance(x, str):
            if not _CONFIG_TEXT.match(x):
                raise RefusedPlan(f"{where}.{k}: text outside [A-Za-z0-9_.:+-] or longer than 64")
        elif x is not None and not (isinstance(x, (bool, int)) or (isinstance(x, float) and math.isfinite(x))):
            raise RefusedPlan(f"{where}.{k}: expected a number, a short text, true/false or null")
        out[k] = x
    return out


def validate(doc: Any, binaries: dict[str, bytes], batch_size: int, seq_len: int, limits: Limits) -> Plan:
    """The plan ``doc`` says (with its ``binaries`` by file name) for the case, or RefusedPlan naming the field."""
    d = _keys(
        doc,
        "plan",
        {"plan_version", "batch_size", "seq_len", "scratch", "kernels", "launches"},
        {"config", "recorded"},
    )
    if d["plan_version"] != PLAN_VERSION:
        raise RefusedPlan(f"plan.plan_version: {str(d['plan_version'])[:20]} is not {PLAN_VERSION}")
    if d["batch_size"] != batch_size or d["seq_len"] != seq_len:
        raise RefusedPlan(f"plan: recorded for B{d['batch_size']}_S{d['seq_len']}, not B{batch_size}_S{seq_len}")
    cap = scratch_cap(batch_size, seq_len)
    scratch = tuple(_int(x, "plan.scratch", 1, cap) for x in _list(d["scratch"], "plan.scratch", MAX_ARGS))
    if sum(scratch) > cap:
        raise RefusedPlan(f"plan.scratch: {sum(scratch)} bytes of scratch (at most {cap}, {SCRATCH_FACTOR}x outputs)")
    sizes = buffer_bytes(batch_size, seq_len)
    sizes.update({("scratch", i): n for i, n in enumerate(scratch)})
    kernels = tuple(
        _kernel(k, f"plan.kernels[{i}]", binaries, limits, cap)
        for i, k in enumerate(_list(d["kernels"], "plan.kernels", MAX_KERNELS, 1))
    )
    launches = []
    for i, ln in enumerate(_list(d["launches"], "plan.launches", MAX_LAUNCHES, 1)):
        where = f"plan.launches[{i}]"
        ln = _keys(ln, where, {"kernel", "grid", "args"})
        k = _int(ln["kernel"], f"{where}.kernel", 0, len(kernels) - 1)
        kern = kernels[k]
        gx, gy, gz = (_int(g, f"{where}.grid", 0, 2**31 - 1) for g in _list(ln["grid"], f"{where}.grid", 3, 3))
        if gx * kern.num_ctas > 2**31 - 1 or gy > 65535 or gz > 65535:
            raise RefusedPlan(f"{where}.grid: beyond the device's grid limits")
        if kern.global_scratch_size * gx * gy * gz * kern.num_ctas > cap:
            raise RefusedPlan(f"{where}: Triton's global scratch for this grid exceeds {cap} bytes")
        args = _list(ln["args"], f"{where}.args", MAX_ARGS)
        if len(args) != len(kern.signature):
            raise RefusedPlan(f"{where}.args: {len(args)} arguments for a signature of {len(kern.signature)}")
        launches.append(
            Launch(
                k,
                (gx, gy, gz),
                tuple(
                    _arg(a, ty, f"{where}.args[{j}] ({name})", sizes)
                    for j, (a, (name, ty)) in enumerate(zip(args, kern.signature, strict=True))
                ),
            )
        )
    recorded = d.get("recorded") or {}
    if not isinstance(recorded, dict) or len(json.dumps(recorded)) > 4096:
        raise RefusedPlan("plan.recorded: expected a small object")
    config = _config(d.get("config"), "plan.config")
    return Plan(batch_size, seq_len, kernels, tuple(launches), scratch, config, recorded)
