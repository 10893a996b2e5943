#!/usr/bin/env bash
# One device-tool call for issue 21's v24 (kernel/NOTES.md item 25; GPU machine, repository root): the first pass
# out of lockstep (GluonConfig.k_rotate: each program walks every tile's K-steps from its own offset, around) and
# K-steps of 32 with 12 stages (bk 32: the same ring bytes, a stage back to the loader after half the bytes), beside
# each bucket's table entry, the tile-language kernel and cuBLAS at M = 256-8192; the per-bucket winners into
# GLUON_TABLE; the GPU tests and the 16 cases only where that changed the table (scripts/gpu_v19_session.sh's steps,
# logs v24_*); then the trace of the first pass at M = 1024 / 2048 (v24_trace.log). Run b: 128x256 grad_weight
# tiles beside 128x128 grad_attn ones at M = 512-2048 (3 stages, or 4 with the two-pass epilogue; logs v24b_*).
# Run c: no sweep; the loader alone with its stages released as the real consumers release them after an emulated
# MMA of 300 ns a step (scripts/diag_loads_only.py --hold-ns), 4, 6 and 7 stages, cold and warm (v24c_loads.log).
# Run d (after v24c, the ring's barriers initialised without arrivals): bk 32 again beside the entries at
# M = 512-2048, then the trace of both at M = 1024 with the L2 flushed and warm (logs v24d_*).
# Run e: the loader initialises each stage's mbarriers as it first fills it (lazy_init) on every bucket's entry,
# selected at a 0.5 % margin (a change of the start-up only), then the trace of both at M = 256 / 1024 (v24e2_*).
# Run f: on the lazy-init entries, reshaped asked of L2 whole during the first grad_attn tile (l2_prefetch 16, at
# K-step 2 or 8) at M = 1024 / 2048, selected at 0.5 %, then the trace at M = 1024 (v24f_*).
# Usage: bash scripts/gpu_v24_session.sh [b|c|d|e|f]   (~450 s at most with the machine warm; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "" | b | c | d | e | f) ;;
  *) echo "gpu_v24_session.sh: unknown run '$1' (b, c, d, e or f; none: run a); -h says what each runs" >&2; exit 2 ;;
esac
if [ "${1:-}" = c ]; then
  mkdir -p "${OUT:-/tmp/out}"
  PYTHONPATH=$PWD timeout 240 python3 scripts/diag_loads_only.py --ms 1024 2048 --kinds both --hold-ns 0,300 \
    --stages 4,6,7 --reps 10 2>&1 | grep -v -i warn | tee "${OUT:-/tmp/out}/v24c_loads.log"
  exit 0
fi
ONLY="pp7_256 pp7kr1_256 v18_512 kr1_512 kr8_512 bk32_512 v18_1024 kr1_1024 kr8_1024 bk32_1024 bk32kr1_1024"
ONLY="$ONLY v18_2048 kr1_2048 kr8_2048 bk32_2048 w256s3_4096 w256s3kr1_4096 w256s3_8192 w256s3kr1_8192"
TIMED="8,128 4,128 1,256 16,128 2,2048 2,4096" TAG=v24 TRACED=coop,kr1,kr8,bk32 TRACE_MS="1024 2048"
if [ "${1:-}" = b ]; then
  ONLY="v18_512 gw256s3_512 gw256s4h_512 v18_1024 gw256s3_1024 gw256s4h_1024 v18_2048 gw256s3_2048 gw256s4h_2048"
  TIMED="4,128 1,512 8,128 1,1024 16,128 2,1024" TAG=v24b TRACED=coop,gw256s3,gw256s4h TRACE_MS="512 1024"
fi
if [ "${1:-}" = d ]; then
  ONLY="v18_512 bk32_512 v18_1024 bk32_1024 v18_2048 bk32_2048" TIMED="4,128 8,128 1,1024 16,128" TAG=v24d
  TRACED=coop,bk32 TRACE_MS=1024
fi
MARGIN=0.015
if [ "${1:-}" = e ]; then
  ONLY="pp7_256 pp7lz_256 v18_512 lz_512 v18_1024 lz_1024 v18_2048 lz_2048 w256s3_4096 w256s3lz_4096 w256s3_8192"
  ONLY="$ONLY w256s3lz_8192" TAG=v24e2 TRACED=coop,lazy TRACE_MS="256 1024" MARGIN=0.005
fi
if [ "${1:-}" = f ]; then
  ONLY="lz_1024 lzpfx2_1024 lzpfx8_1024 lz_2048 lzpfx2_2048 lzpfx8_2048" TIMED="8,128 1,1024 16,128 2,1024"
  TAG=v24f TRACED=coop,pfx8 TRACE_MS=1024 MARGIN=0.005
fi
ONLY=${V24_ONLY:-$ONLY} TIMED=${V24_TIMED:-$TIMED}
export SWEEP_ARGS="--only $ONLY --budget-s 200 --timed $TIMED --margin $MARGIN" TAG SWEEP_TIMEOUT=300 TESTS_TIMEOUT=100
bash "$(dirname "$0")/gpu_v19_session.sh" sweep apply confirm  # the GPU tests and the 16 cases if the table moved
OUT=${OUT:-/tmp/out}
export PYTHONPATH=$PWD  # the variants traced: each kind's loop per 64-deep step, first wait, epilogue, handoffs
timeout 90 python3 scripts/diag_gluon_timeline.py --ms $TRACE_MS --variants $TRACED --kinds both --reps 10 \
  2>&1 | grep -v -i warn | tee "$OUT/${TAG}_trace.log" | tail -n 24
if [ "${1:-}" = d ]; then  # the same with the L2 as the launch before left it: what the cold start owes to DRAM
  timeout 60 python3 scripts/diag_gluon_timeline.py --ms $TRACE_MS --variants $TRACED --kinds both --reps 10 --warm \
    2>&1 | grep -v -i warn | tee "$OUT/${TAG}_trace_warm.log" | tail -n 12
fi
