"""Fused backward of the attention output projection with reshape: one persistent Triton launch.

grad_attn_output = (grad_output @ weight) viewed (B, S, 32, 64) and stored as (B, 32, S, 64)
grad_weight      = grad_output(M, 2048).T @ reshaped(M, 2048),   M = B * S

The tiles of both products share one tile space. The host picks the schedule per call (kernel/schedule.py):
either every program walks the whole space, longer kind of tile first, or the programs are partitioned so that
some run only grad_attn_output tiles and the others only grad_weight tiles, in the proportion that balances their
work. Accumulation is float32. grad_attn_output is written straight into the (B, H, S, D) layout by the epilogue.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernel import fast_launch, gluon_backward
from kernel.configs import WARP_SPECIALIZE, KernelConfig, bucket_for, config_for, interpreter_active
from kernel.schedule import Plan, plan_schedule
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS


@triton.jit
def _tile_coords(tile, n_m, n_n, GROUP: tl.constexpr):
    """Grouped tile order: GROUP row-blocks share column-blocks in flight, for L2 reuse."""
    width = GROUP * n_n
    group_id = tile // width
    first_m = group_id * GROUP
    group_size = tl.minimum(n_m - first_m, GROUP)
    pid_m = first_m + (tile % width) % group_size
    pid_n = (tile % width) // group_size
    return pid_m, pid_n


@triton.jit
def _ga_tiles(
    lo,
    step,
    n_ga,
    n_ga_m,
    go_a,
    w_b,
    ga_out,
    go_ptr,
    w_ptr,
    ga_ptr,
    M,
    S,
    HID: tl.constexpr,
    NH: tl.constexpr,
    HD: tl.constexpr,
    GA_BM: tl.constexpr,
    GA_BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
    USE_TMA: tl.constexpr,
    GA_TMA: tl.constexpr,
    FP32_DOT: tl.constexpr,
    WS_TILES: tl.constexpr,
    WS_K: tl.constexpr,
):
    """grad_attn_output tiles lo, lo+step, ... < n_ga: rows of M x columns of 2048, K = 2048; the epilogue writes
    row m = b*S + s, column c = h*HD + d to ((b*NH + h)*S + s)*HD + d (GA_BN is a multiple of HD)."""
    n_ga_n: tl.constexpr = HID // GA_BN
    for t in tl.range(lo, n_ga, step, warp_specialize=WS_TILES):
        am, an = _tile_coords(t, n_ga_m, n_ga_n, GROUP)
        off_m = am * GA_BM
        off_n = an * GA_BN
        rows = off_m + tl.arange(0, GA_BM)
        cols = off_n + tl.arange(0, GA_BN)
        acc = tl.zeros((GA_BM, GA_BN), dtype=tl.float32)
        for k in tl.range(0, HID, BK, warp_specialize=WS_K):
            if USE_TMA:
                a = go_a.load([off_m, k])
                b = w_b.load([k, off_n])
            else:
                ka = k + tl.arange(0, BK)
                a = tl.load(go_ptr + rows[:, None].to(tl.int64) * HID + ka[None, :], mask=rows[:, None] < M, other=0.0)
                b = tl.load(w_ptr + ka[:, None] * HID + cols[None, :])
            if FP32_DOT:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        # ((b*NH + h)*S + s)*HD + d = (b*NH*S + s)*HD + h*S*HD + d: a row term, a head term and d, so the store
        # is a (rows, heads, HD) block whose last axis is contiguous (vector stores, not one element at a time).
        NHB: tl.constexpr = GA_BN // HD
        vals = tl.reshape(acc.to(ga_ptr.dtype.element_ty), (GA_BM, NHB, HD))
        if GA_TMA:
            # S is a multiple of GA_BM: the tile's rows are one batch's rows s0 .. s0+GA_BM, and its heads are
            # NHB consecutive (b*NH + h) slabs of the (B*NH, S, HD) view: one asynchronous TMA store.
            b0 = off_m // S
            ga_out.store([b0 * NH + off_n // HD, off_m - b0 * S, 0], tl.permute(vals, (1, 0, 2)))
        else:
            r64 = rows.to(tl.int64)
            bi = r64 // S
            row_off = (bi * (NH - 1) * S + r64) * HD  # b*NH*S + s = b*(NH-1)*S + m
            head_off = (off_n // HD + tl.arange(0, NHB)).to(tl.int64) * S * HD
            offs = row_off[:, None, None] + head_off[None, :, None] + tl.arange(0, HD)[None, None, :]
            tl.store(ga_ptr + offs, vals, mask=(rows < M)[:, None, None])


@triton.jit
def _gw_tiles(
    lo,
    step,
    n_gw,
    n_gw_m,
    go_t,
    x_b,
    gw_out,
    go_ptr,
    x_ptr,
    gw_ptr,
    M,
    HID: tl.constexpr,
    GW_BM: tl.constexpr,
    GW_BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
    USE_TMA: tl.constexpr,
    TMA_STORE: tl.constexpr,
    FP32_DOT: tl.constexpr,
    WS_TILES: tl.constexpr,
    WS_K: tl.constexpr,
):
    """grad_weight tiles lo, lo+step, ... < n_gw: (out features) x (in features), reduced over the M rows."""
    n_gw_n: tl.constexpr = HID // GW_BN
    for t in tl.range(lo, n_gw, step, warp_specialize=WS_TILES):
        wm, wn = _tile_coords(t, n_gw_m, n_gw_n, GROUP)
        off_o = wm * GW_BM
        off_i = wn * GW_BN
        acc = tl.zeros((GW_BM, GW_BN), dtype=tl.float32)
        for k in tl.range(0, M, BK, warp_specialize=WS_K):
            if USE_TMA:
                a = go_t.load([k, off_o])  # rows past M are zero-filled by the descriptor
                b = x_b.load([k, off_i])
            else:
                kw = k + tl.arange(0, BK)
                kmask = kw[:, None] < M
                k64 = kw[:, None].to(tl.int64) * HID
                a = tl.load(go_ptr + k64 + (off_o + tl.arange(0, GW_BM))[None, :], mask=kmask, other=0.0)
                b = tl.load(x_ptr + k64 + (off_i + tl.arange(0, GW_BN))[None, :], mask=kmask, other=0.0)
            if FP32_DOT:
                acc = tl.dot(a.to(tl.float32).T, b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a.T, b, acc)
        res = acc.to(gw_ptr.dtype.element_ty)
        if USE_TMA and TMA_STORE:
            gw_out.store([off_o, off_i], res)
        else:
            ro = off_o + tl.arange(0, GW_BM)
            ri = off_i + tl.arange(0, GW_BN)
            tl.store(gw_ptr + ro[:, None] * HID + ri[None, :], res)


# M, S, the tile counts and the partition vary per call: not specialising them keeps one compiled kernel per
# configuration.
@triton.jit(do_not_specialize=["M", "S", "n_ga_m", "n_gw_m", "P_GA"])
def _fused_bwd_kernel(
    go_a,  # grad_output as the A operand of grad_attn (desc [GA_BM, BK] or pointer)
    w_b,  # weight as the B operand of grad_attn (desc [BK, GA_BN] or pointer)
    go_t,  # grad_output as the transposed A operand of grad_weight (desc [BK, GW_BM] or pointer)
    x_b,  # reshaped as the B operand of grad_weight (desc [BK, GW_BN] or pointer)
    gw_out,  # grad_weight (desc [GW_BM, GW_BN] or pointer)
    ga_out,  # grad_attn_output viewed (B*H, S, D) (desc [GA_BN // D, GA_BM, D]; None unless GA_TMA)
    go_ptr,
    w_ptr,
    x_ptr,
    gw_ptr,  # raw pointers (used when USE_TMA is off)
    ga_ptr,  # grad_attn_output, contiguous (B, H, S, D)
    M,
    S,
    n_ga_m,
    n_gw_m,
    P_GA,  # programs that run only grad_attn_output tiles (0: every program walks the whole tile space)
    GA_FIRST: tl.constexpr,
    TMA_STORE: tl.constexpr,
    GA_TMA: tl.constexpr,
    WS: tl.constexpr,
    HID: tl.constexpr,
    NH: tl.constexpr,
    HD: tl.constexpr,
    GA_BM: tl.constexpr,
    GA_BN: tl.constexpr,
    GW_BM: tl.constexpr,
    GW_BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
    USE_TMA: tl.constexpr,
    DEVICE_DESC: tl.constexpr,
    FP32_DOT: tl.constexpr,
):
    if DEVICE_DESC:
        go_a = tl.make_tensor_descriptor(go_ptr, [M, HID], [HID, 1], [GA_BM, BK])
        w_b = tl.make_tensor_descriptor(w_ptr, [HID, HID], [HID, 1], [BK, GA_BN])
        go_t = tl.make_tensor_descriptor(go_ptr, [M, HID], [HID, 1], [BK, GW_BM])
        x_b = tl.make_tensor_descriptor(x_ptr, [M, HID], [HID, 1], [BK, GW_BN])
        gw_out = tl.make_tensor_descriptor(gw_ptr, [HID, HID], [HID, 1], [GW_BM, GW_BN])
        if GA_TMA:
            ga_out = tl.make_tensor_descriptor(
                ga_ptr, [(M // S) * NH, S, HD], [S * HD, HD, 1], [GA_BN // HD, GA_BM, HD]
            )
    n_ga = n_ga_m * (HID // GA_BN)
    n_gw = n_gw_m * (HID // GW_BN)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    # Which tiles this program runs (kernel/schedule.py). Partitioned (P_GA > 0): programs below P_GA stride over
    # the grad_attn tiles, the others over the grad_weight tiles. Shared (P_GA == 0): every program strides over
    # the tile space [longer kind..., shorter kind...]; after its first-kind tiles it continues in the second
    # kind at the next unit of its stride.
    if P_GA > 0:
        if pid < P_GA:
            ga_lo = pid
            ga_step = P_GA
            gw_lo = n_gw
            gw_step = 1
        else:
            ga_lo = n_ga
            ga_step = 1
            gw_lo = pid - P_GA
            gw_step = nprog - P_GA
    else:
        n_first = n_gw
        if GA_FIRST:
            n_first = n_ga
        second_lo = pid + tl.cdiv(tl.maximum(n_first - pid, 0), nprog) * nprog - n_first
        ga_lo = second_lo
        gw_lo = pid
        if GA_FIRST:
            ga_lo = pid
            gw_lo = second_lo
        ga_step = nprog
        gw_step = nprog
    # WS: the index of the config's warp_specialize in configs.WARP_SPECIALIZE (none, k_loop, tiles).
    WS_TILES: tl.constexpr = WS == 2
    WS_K: tl.constexpr = WS == 1
    # The two kinds of tile, in the plan's order (GA_FIRST): unrolled at compile time, one call site each.
    for phase in tl.static_range(2):
        if (phase == 0) == GA_FIRST:
            _ga_tiles(
                ga_lo,
                ga_step,
                n_ga,
                n_ga_m,
                go_a,
                w_b,
                ga_out,
                go_ptr,
                w_ptr,
                ga_ptr,
                M,
                S,
                HID,
                NH,
                HD,
                GA_BM,
                GA_BN,
                BK,
                GROUP,
                USE_TMA,
                GA_TMA,
                FP32_DOT,
                WS_TILES,
                WS_K,
            )
        else:
            _gw_tiles(
                gw_lo,
                gw_step,
                n_gw,
                n_gw_m,
                go_t,
                x_b,
                gw_out,
                go_ptr,
                x_ptr,
                gw_ptr,
                M,
                HID,
                GW_BM,
                GW_BN,
                BK,
                GROUP,
                USE_TMA,
                TMA_STORE,
                FP32_DOT,
                WS_TILES,
                WS_K,
            )


# ------------------------------------------------------------------------------------------------ launcher
_SUPPORTED_DTYPES = (torch.bfloat16,)


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[first, last) bytes a tensor can touch (its whole storage when it is not contiguous)."""
    if t.is_contiguous():
        start = t.data_ptr()
        return start, start + t.numel() * t.element_size()
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _ranges_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] != a[1] and b[0] != b[1]


def _validate(
    grad_output: torch.Tensor,
    reshaped: torch.Tensor,
    weight: torch.Tensor,
    out: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[int, int]:
    """Check the arguments; ValueError naming the argument. Kept lean: it runs on every call."""
    named = (("grad_output", grad_output), ("reshaped", reshaped), ("weight", weight))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _SUPPORTED_DTYPES:
            raise ValueError(f"{name}: dtype must be torch.bfloat16, got {t.dtype}")
    shape = grad_output.shape
    for name, t in named[:2]:
        tshape = t.shape
        if len(tshape) != 3:
            raise ValueError(f"{name}: expected rank 3 (batch, seq_len, {HIDDEN}), got shape {tuple(tshape)}")
        if tshape[2] != HIDDEN:
            raise ValueError(f"{name}: hidden size must be {HIDDEN}, got {tshape[2]}")
        if tshape[0] < 1 or tshape[1] < 1:
            raise ValueError(f"{name}: batch_size and seq_len must be >= 1, got shape {tuple(tshape)}")
    if reshaped.shape != shape:
        raise ValueError(f"reshaped: shape {tuple(reshaped.shape)} must equal grad_output's {tuple(shape)}")
    if weight.shape != (HIDDEN, HIDDEN):
        raise ValueError(f"weight: expected shape ({HIDDEN}, {HIDDEN}), got {tuple(weight.shape)}")
    device = grad_output.device
    for name, t in named[1:]:
        if t.device != device:
            raise ValueError(f"{name}: on {t.device}, but grad_output is on {device}; all must share a device")
    if device.type != "cuda" and not interpreter_active():
        raise ValueError(
            f"grad_output: on {device}; the kernel needs a CUDA device (or TRITON_INTERPRET=1 for the CPU)"
        )
    b, s = shape[0], shape[1]
    if out is not None:
        _validate_out(out, named, b, s, grad_output.dtype, device)
    return b, s


def _validate_out(
    out: tuple[torch.Tensor, torch.Tensor], named: tuple, b: int, s: int, dtype: torch.dtype, device: torch.device
) -> None:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise ValueError("out: expected a pair (grad_attn_output, grad_weight)")
    expected = ((b, NUM_HEADS, s, HEAD_DIM), (HIDDEN, HIDDEN))
    in_ranges = [_byte_range(t) for _, t in named]
    out_ranges = []
    for i, t in enumerate(out):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{_OUT_NAMES[i]}: expected a torch.Tensor, got {type(t).__name__}")
        if t.shape != expected[i]:
            raise ValueError(f"{_OUT_NAMES[i]}: expected shape {expected[i]}, got {tuple(t.shape)}")
        if t.dtype != dtype:
            raise ValueError(f"{_OUT_NAMES[i]}: dtype must be {dtype}, got {t.dtype}")
        if t.device != device:
            raise ValueError(f"{_OUT_NAMES[i]}: on {t.device}, but the inputs are on {device}")
        if not t.is_contiguous():
            raise ValueError(f"{_OUT_NAMES[i]}: must be contiguous")
        if t.data_ptr() % 16:
            raise ValueError(f"{_OUT_NAMES[i]}: must be 16-byte aligned")
        rng = _byte_range(t)
        for (in_name, _), src_rng in zip(named, in_ranges, strict=True):
            if _ranges_overlap(rng, src_rng):
                raise ValueError(f"{_OUT_NAMES[i]}: aliases the input {in_name}; outputs must not share its memory")
        out_ranges.append(rng)
    if _ranges_overlap(out_ranges[0], out_ranges[1]):
        raise ValueError("out: grad_attn_output and grad_weight share memory")


_OUT_NAMES = ("out[0] (grad_attn_output)", "out[1] (grad_weight)")


def _as_2d(t: torch.Tensor) -> torch.Tensor:
    """A contiguous, 16-byte aligned (rows, 2048) view; copies (never mutates) when the input is not."""
    t2 = t.reshape(-1, HIDDEN)
    if not t2.is_contiguous():
        t2 = t2.contiguous()
    if t2.data_ptr() % 16:
        t2 = t2.clone(memory_format=torch.contiguous_format)
    return t2


def kernel_config(m: int, device: torch.device | str) -> KernelConfig:
    """The configuration the launcher would choose for M on this device."""
    device = torch.device(device)
    if interpreter_active() or device.type != "cuda":
        return _config_cached(bucket_for(m), None)
    return _config_cached(bucket_for(m), device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=256)
def _config_cached(bucket: int, device_index: int | None) -> KernelConfig:
    cap = None if device_index is None else torch.cuda.get_device_capability(device_index)
    return config_for(bucket, cap)


@functools.lru_cache(maxsize=1024)
def _gluon_choice(m: int, s: int, device_index: int) -> gluon_backward.GluonConfig | None:
    """The Gluon configuration for this shape on this device, or None (the tile-language kernel)."""
    if interpreter_active():
        return None
    return gluon_backward.gluon_config_for(m, s, torch.cuda.get_device_capability(device_index))


@functools.lru_cache(maxsize=64)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


_ALLOCATOR_SET = False


def _ensure_allocator() -> None:
    """Device-side tensor descriptors need scratch memory; Triton asks for it through this allocator."""
    global _ALLOCATOR_SET
    if not _ALLOCATOR_SET:
        triton.set_allocator(
            lambda size, align, stream: (
                torch.empty(size, dtype=torch.int8, device=torch.cuda.current_device())
                if not interpreter_active()
                else torch.empty(size, dtype=torch.int8)
            )
        )
        _ALLOCATOR_SET = True


def _num_programs(device: torch.device, cfg: KernelConfig) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: few programs, so that it exercises the persistent loop
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device()) * cfg.occupancy


def attn_output_proj_backward(
    grad_output: torch.Tensor,
    reshaped: torch.Tensor,
    weight: torch.Tensor,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    config: KernelConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward of ``y = reshaped @ weight.T`` where ``reshaped`` came from (B, H, S, D) attention output.

    Returns ``(grad_attn_output (B, 32, S, 64), grad_weight (2048, 2048))`` in the inputs' dtype (bf16).
    With ``out=(ga, gw)`` the results are written into those contiguous tensors. ``config`` overrides the
    per-architecture table (for tuning; it also bypasses the Gluon table of ``kernel/gluon_backward.py``, which
    otherwise picks the Gluon kernel on Hopper for the shapes it enables). Raises ValueError naming the argument
    on bad input.
    """
    b, s = _validate(grad_output, reshaped, weight, out)
    m = b * s
    device = grad_output.device
    if out is None:
        ga = torch.empty((b, NUM_HEADS, s, HEAD_DIM), dtype=grad_output.dtype, device=device)
        gw = torch.empty((HIDDEN, HIDDEN), dtype=grad_output.dtype, device=device)
    else:
        ga, gw = out
    go2 = _as_2d(grad_output)
    x2 = _as_2d(reshaped)
    w2 = _as_2d(weight)
    if config is None and device.type == "cuda":
        # The Gluon schedule (kernel/gluon_backward.py) where its table enables it for this shape and device.
        gcfg = _gluon_choice(m, s, device.index if device.index is not None else torch.cuda.current_device())
        if gcfg is not None:
            gluon_backward.launch(go2, w2, x2, gw, ga, s, gcfg)
            return ga, gw
    cfg = config or kernel_config(m, device)

    plan = plan_schedule(m, cfg, _num_programs(device, cfg))
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None

    descs, args, constexprs = launch_arguments(go2, w2, x2, gw, ga, s, cfg, plan, cuda=device.type == "cuda")
    if cfg.use_tma and descs is None:
        _ensure_allocator()
    _launch(
        device,
        stream,
        plan.programs,
        descs,
        args,
        constexprs,
        cfg,
    )
    return ga, gw


def launch_arguments(
    go2: torch.Tensor,
    w2: torch.Tensor,
    x2: torch.Tensor,
    gw: torch.Tensor,
    ga: torch.Tensor,
    s: int,
    cfg: KernelConfig,
    plan: Plan,
    *,
    cuda: bool,
) -> tuple[tuple | None, tuple, tuple]:
    """What one launch passes the kernel: ``(descs, args, constexprs)``, for the launcher and for compiling
    ahead of time (``scripts/diag_compile.py``).

    ``descs`` are the host tensor descriptors as (tensor, block shape[, shape it is viewed as]) for grad_output,
    weight, grad_output, reshaped, grad_weight and grad_attn_output viewed (B*H, S, D) (no view object is made
    on this hot path), or None when the kernel builds them itself or does not use TMA. ``constexprs`` follow
    ``CONSTEXPR_NAMES``.
    """
    m = go2.shape[0]
    fp32_dot = not cuda  # the interpreter has no bf16 dot: accumulate in fp32
    ws_mode = 0 if fp32_dot else WARP_SPECIALIZE.index(cfg.warp_specialize)
    # grad_attn tiles stored by TMA when every tile's rows lie in one batch (S a multiple of the tile's rows).
    ga_tma = cfg.use_tma and cfg.ga_tma_store and s % cfg.ga_bm == 0
    constexprs = (
        plan.ga_first,
        cfg.tma_store,
        ga_tma,
        ws_mode,
        HIDDEN,
        NUM_HEADS,
        HEAD_DIM,
        cfg.ga_bm,
        cfg.ga_bn,
        cfg.gw_bm,
        cfg.gw_bn,
        cfg.bk,
        cfg.group,
        cfg.use_tma,
        cfg.use_tma and cfg.device_desc,
        fp32_dot,
    )
    descs = None
    if cfg.use_tma and not cfg.device_desc:
        descs = (
            (go2, (cfg.ga_bm, cfg.bk)),
            (w2, (cfg.bk, cfg.ga_bn)),
            (go2, (cfg.bk, cfg.gw_bm)),
            (x2, (cfg.bk, cfg.gw_bn)),
            (gw, (cfg.gw_bm, cfg.gw_bn)),
            (ga, (cfg.ga_bn // HEAD_DIM, cfg.ga_bm, HEAD_DIM), (m // s * NUM_HEADS, s, HEAD_DIM)) if ga_tma else None,
        )
    args = (go2, w2, x2, gw, ga, m, s, plan.n_ga_m, plan.n_gw_m, plan.p_ga)
    return descs, args, constexprs


def shape_strides(base: torch.Tensor, shape: tuple[int, ...] | None = None) -> tuple[list[int], list[int]]:
    """Shape and strides of a contiguous ``base`` read as ``shape`` (its own shape when None)."""
    if shape is None:
        return list(base.shape), list(base.stride())
    strides = [1]
    for dim in reversed(shape[1:]):
        strides.insert(0, strides[0] * dim)
    return list(shape), strides


CONSTEXPR_NAMES = (
    "GA_FIRST",
    "TMA_STORE",
    "GA_TMA",
    "WS",
    "HID",
    "NH",
    "HD",
    "GA_BM",
    "GA_BN",
    "GW_BM",
    "GW_BN",
    "BK",
    "GROUP",
    "USE_TMA",
    "DEVICE_DESC",
    "FP32_DOT",
)


def _launch(
    device: torch.device,
    stream: int | None,
    grid0: int,
    descs: tuple | None,
    args: tuple,
    constexprs: tuple,
    cfg: KernelConfig,
) -> None:
    """One launch: through Triton's dispatcher the first time a configuration runs on a device (it compiles
    it), under the interpreter, or with a launch hook registered; later through ``kernel.fast_launch``."""
    key = (device.index, cfg, constexprs)
    compiled = fast_launch.compiled_for(key) if device.type == "cuda" else None
    if compiled is None:
        full = tensor_descriptors(descs) + args
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            kernel = _fused_bwd_kernel[(grid0,)](
                *full,
                **dict(zip(CONSTEXPR_NAMES, constexprs, strict=True)),
                num_warps=cfg.num_warps,
                num_stages=cfg.num_stages,
            )
        if device.type == "cuda":
            fast_launch.remember(key, kernel)
        return
    parts = (
        (None,) * 6
        if descs is None
        else tuple(None if d is None else (d[0], *shape_strides(d[0], *d[2:])) for d in descs)
    )
    if device.index is not None and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # the compiled function belongs to that device's context
            fast_launch.launch(compiled, (grid0, 1, 1), stream, parts, (*args, *constexprs))
    else:
        fast_launch.launch(compiled, (grid0, 1, 1), stream, parts, (*args, *constexprs))


def tensor_descriptors(descs: tuple | None) -> tuple:
    """The host tensor descriptors (``TensorDescriptor``) the dispatcher is given: see ``launch_arguments``."""
    if descs is None:
        return (None,) * 6
    out = []
    for d in descs:
        if d is None:
            out.append(None)
        else:
            shape, strides = shape_strides(d[0], *d[2:])
            out.append(TensorDescriptor(d[0], shape, strides, list(d[1])))
    return tuple(out)
