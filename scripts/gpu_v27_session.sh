#!/usr/bin/env bash
# One device-tool call for issue 21's v27 (kernel/NOTES.md item 27; GPU machine, repository root): on the table's
# entries at M = 512-2048, the cooperative epilogue stored from registers (epi_global: st.global in the
# accumulator's layout, no shared buffers), at the tile's end ("eg1") or beside the next tile's first MMA ("eg2"),
# at the table's 6 stages and with the 7th stage the buffers' 32 KB make room for ("s7"); the per-bucket winners
# into GLUON_TABLE (selected at a 0.5 % margin), the GPU tests and the 16 cases only where that changed the table
# (scripts/gpu_v19_session.sh's steps, logs v27_*); then the trace of the entry and of eg1 at 6 and 7 stages at
# M = 1024 / 2048 (v27_trace.log: the epilogue, the handoffs, the loader's issue and the first stage's latency).
# Run b: no sweep; the trace (with the SM clock over each K loop, column MHz) of the entry and of three diagnostic
# copies with part of its epilogue taken out (nost: no TMA stores, nosm: no stmatrix, noepi: neither), L2 flushed,
# at M = 1024 / 2048, its records saved (v27b_trace.log, v27b_traces.pt); then the entry with a warm L2. Run c: the
# entry's trace at M = 512 / 1024 / 2048 with the programs' skew (entries, spans, exits; the SMs that exit last),
# L2 flushed (v27c_trace.log). Run d: the trace, now with the share of each K loop's clocks spent waiting for data,
# of the entry, the held-stage 7-stage ring, 128x256 tiles and ping-pong at M = 1024 / 2048, then the entry with a
# warm L2 at M = 1024 (v27d_trace.log).
# Usage: bash scripts/gpu_v27_session.sh [b]   (~450 s at most with the machine warm; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "" | b | c | d) ;;
  *) echo "gpu_v27_session.sh: unknown run '$1' (b, c or d; none: run a; -h says what each runs)" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/out}
if [ "${1:-}" = b ]; then
  export PYTHONPATH=$PWD
  timeout 150 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants coop,nost,nosm,noepi --kinds both \
    --reps 10 --save "$OUT/v27b_traces.pt" 2>&1 | grep -v -i warn | tee "$OUT/v27b_trace.log"
  timeout 60 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants coop --kinds both --reps 10 --warm 2>&1 \
    | grep -v -i warn | tee -a "$OUT/v27b_trace.log"
  exit 0
fi
if [ "${1:-}" = c ]; then
  export PYTHONPATH=$PWD
  timeout 100 python3 scripts/diag_gluon_timeline.py --ms 512 1024 2048 --variants coop --kinds both --reps 10 2>&1 \
    | grep -v -i warn | tee "$OUT/v27c_trace.log"
  exit 0
fi
if [ "${1:-}" = d ]; then
  export PYTHONPATH=$PWD
  timeout 150 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants coop,hold7,w256s3,pp7 --kinds both \
    --reps 10 2>&1 | grep -v -i warn | tee "$OUT/v27d_trace.log"
  timeout 60 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants coop --kinds both --reps 10 --warm 2>&1 \
    | grep -v -i warn | tee -a "$OUT/v27d_trace.log"
  exit 0
fi
ONLY=""
for m in 512 1024 2048; do ONLY="$ONLY lz_$m eg1s6_$m eg1s7_$m eg2s6_$m eg2s7_$m"; done
TIMED="8,128 1,1024 4,256 4,128 16,128 2,1024"
TAG=v27 TRACED=coop,eg6,eg7
ONLY=${V27_ONLY:-$ONLY} TIMED=${V27_TIMED:-$TIMED}
export SWEEP_ARGS="--only $ONLY --budget-s 220 --timed $TIMED --margin 0.005" TAG SWEEP_TIMEOUT=300 TESTS_TIMEOUT=100
bash "$(dirname "$0")/gpu_v19_session.sh" sweep apply confirm  # the GPU tests and the 16 cases if the table moved
export PYTHONPATH=$PWD  # the variants traced: each kind's loop per 64-deep step, first wait, epilogue, handoffs
timeout 80 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants $TRACED --kinds both \
  --reps 10 2>&1 | grep -v -i warn | tee "$OUT/${TAG}_trace.log" | tail -n 24
