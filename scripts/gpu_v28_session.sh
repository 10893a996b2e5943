#!/usr/bin/env bash
# One device-tool call for issue 21's v28 (kernel/NOTES.md item 28; GPU machine, repository root): on every bucket's
# table entry, the program's first tile's K-steps asked of L2 2, 4 or 8 steps ahead of the loader's loads
# (first_ahead, "fa{d}": one tensor prefetch a TMA box, the boxes the loads will read), so that the cold first pass
# is served from L2; the per-bucket winners into GLUON_TABLE (selected at a 0.5 % margin), the GPU tests and the 16
# cases only where that changed the table (scripts/gpu_v19_session.sh's steps, logs v28_*); then the trace (the SM
# clock, the data waits) of the entry and of fa4 / fa8 at M = 1024 / 2048 (v28_trace.log).
# Run b: no sweep; the trace at M = 1024 / 2048 of the entry and of its copies without the epilogue's TMA stores
# (nost), its shared-memory writes (nosm, now with every MMA kept: its SASS has the entry's HGMMA) or both (noepi),
# then the entry planned for 64 programs (half the SMs pulling from L2) (v28b_trace.log).
# Run c: the trace of the large cases' entry (128x256 tiles, 3 stages) and of w256s4h (4 stages) at M = 4096 / 8192
# (v28c_trace.log: their loops' clock and data waits).
# Usage: bash scripts/gpu_v28_session.sh [b|c]   (~450 s at most with the machine warm; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "" | b | c) ;;
  *) echo "gpu_v28_session.sh: unknown run '$1' (b or c; none: run a; -h says what each runs)" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/out}
if [ "${1:-}" = b ]; then
  export PYTHONPATH=$PWD
  timeout 120 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants coop,nost,nosm,noepi --kinds both \
    --reps 10 2>&1 | grep -v -i warn | tee "$OUT/v28b_trace.log"
  timeout 60 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants coop --kinds both --reps 10 \
    --programs 64 2>&1 | grep -v -i warn | tee -a "$OUT/v28b_trace.log"
  exit 0
fi
if [ "${1:-}" = c ]; then
  export PYTHONPATH=$PWD
  timeout 150 python3 scripts/diag_gluon_timeline.py --ms 4096 8192 --variants coop,w256s4h --kinds both --reps 5 \
    2>&1 | grep -v -i warn | tee "$OUT/v28c_trace.log"
  exit 0
fi
ONLY="pp7lz_256 pp7lzfa2_256 pp7lzfa4_256 pp7lzfa8_256"
for m in 512 1024 2048; do ONLY="$ONLY lz_$m fa2_$m fa4_$m fa8_$m"; done
for m in 4096 8192; do ONLY="$ONLY w256s3_$m w256s3fa2_$m w256s3fa4_$m w256s3fa8_$m"; done
TIMED="8,128 1,1024 4,256 4,128 1,256 16,128 2,1024 4,1024 2,4096"
ONLY=${V28_ONLY:-$ONLY} TIMED=${V28_TIMED:-$TIMED} TAG=v28
export SWEEP_ARGS="--only $ONLY --budget-s 220 --timed $TIMED --margin 0.005" TAG SWEEP_TIMEOUT=300 TESTS_TIMEOUT=100
bash "$(dirname "$0")/gpu_v19_session.sh" sweep apply confirm  # the GPU tests and the 16 cases if the table moved
export PYTHONPATH=$PWD
timeout 80 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants coop,fa4,fa8 --kinds both --reps 10 2>&1 \
  | grep -v -i warn | tee "$OUT/${TAG}_trace.log" | tail -n 30
