#!/usr/bin/env bash
# One device-tool call for issue 21's v33 (kernel/NOTES.md item 33; GPU machine, repository root): v27's epilogue
# from registers with its stores in 16-byte rows of whole 128-byte lines (epi_vec: the pairs moved within each warp by
# shuffles, no shared memory), at the tile's end (ev1) and beside the next tile's first MMA (ev2), swept beside the
# table's entries at M = 512-2048 (CUPTI span, the entry timed twice, the 0.5 % margin: v33_sweep.log,
# v33_select.json); its GPU tests (v33_gpu_tests.log); the trace of ev7 beside the entry at M = 1024 (v33_trace.log).
# A selection that moves a bucket is applied and confirmed by the next call (gpu_v19_session.sh tests bench on the
# committed table), not here. Run b (item 33's run b): what items 30 and 32 left untimed at M >= 4096, stream-K (sk,
# after its waterfall loops went) and v32's deferred epilogue on 128x256 tiles in K-steps of 32 (w256b32s6d), beside
# the entries (v33b_sweep.log, v33b_select.json).
# Usage: bash scripts/gpu_v33_session.sh [b]   (~400 s at most; b: ~250 s; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "" | b) ;;
  *) echo "gpu_v33_session.sh: unknown run '$1' (b; none: run a; -h says what each runs)" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if [ "${1:-}" = b ]; then
  ONLY="w256s3_4096 sk_4096 w256b32s6d_4096 w256s3_8192 sk_8192 w256b32s6d_8192"
  export SWEEP_ARGS="--only $ONLY --budget-s 170 --timed 4,1024 2,4096 --margin 0.005 --check-timeout-s 90" \
    TAG=v33b SWEEP_TIMEOUT=240
  bash "$(dirname "$0")/gpu_v19_session.sh" sweep
  cp "$OUT/select.json" "$OUT/v33b_select.json" 2>/dev/null
  exit 0
fi
ONLY="lz_1024 ev1s7_1024 ev2s7_1024 ev2s6_1024 lz_512 ev1s7_512 ev2s7_512 lz_2048 ev1s7_2048 ev2s7_2048"
export SWEEP_ARGS="--only $ONLY --budget-s 200 --timed 8,128 4,128 16,128 --margin 0.005 --check-timeout-s 90" \
  TAG=v33 SWEEP_TIMEOUT=270
bash "$(dirname "$0")/gpu_v19_session.sh" sweep
cp "$OUT/select.json" "$OUT/v33_select.json" 2>/dev/null
timeout 45 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants coop,ev7 --kinds both --reps 10 2>&1 \
  | grep -v -i warn | tee "$OUT/v33_trace.log" | tail -n 12
timeout 90 python3 -m pytest --noconftest -q -m gpu tests/kernel/test_gluon.py -k "16_byte_rows" 2>&1 \
  | tee "$OUT/v33_gpu_tests.log" | tail -n 5
exit 0
