#!/usr/bin/env bash
# One device-tool call for issue 21's v34 (kernel/NOTES.md item 34; GPU machine, repository root): the loader's
# sleep after the ring's first stage (first_delay 150 / 300 / 600 ns: the first 32 KB alone in the SMs' intake before
# the other stages' loads) swept beside every entry of M = 256-2048 (CUPTI span, the entry timed twice, the 0.5 %
# margin: v34_sweep.log, v34_select.json); the trace of fd300 and fd600 beside the entry at M = 1024 (the first
# stage's arrival from the entry: v34_trace.log); its GPU test (v34_gpu_tests.log). A selection that moves a bucket
# is applied and confirmed by the next call (gpu_v19_session.sh tests bench on the committed table), not here.
# Usage: bash scripts/gpu_v34_session.sh   (~350 s at most, logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [ -n "${1:-}" ]; then
  echo "gpu_v34_session.sh: no arguments ('$1'); -h says what it runs" >&2
  exit 2
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ONLY="lz_1024 fd150_1024 fd300_1024 fd600_1024 lz_512 fd150_512 fd300_512 fd600_512"
ONLY="$ONLY pp7lz_256 fd150_256 fd300_256 fd600_256 lz_2048 fd150_2048 fd300_2048 fd600_2048"
export SWEEP_ARGS="--only $ONLY --budget-s 190 --timed 8,128 4,128 1,256 16,128 --margin 0.005 \
--check-timeout-s 90" TAG=v34 SWEEP_TIMEOUT=260
bash "$(dirname "$0")/gpu_v19_session.sh" sweep
cp "$OUT/select.json" "$OUT/v34_select.json" 2>/dev/null
timeout 45 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants coop,fd300,fd600 --kinds both --reps 10 2>&1 \
  | grep -v -i warn | tee "$OUT/v34_trace.log" | tail -n 16
timeout 60 python3 -m pytest --noconftest -q -m gpu tests/kernel/test_gluon.py -k "first_delay" 2>&1 \
  | tee "$OUT/v34_gpu_tests.log" | tail -n 5
exit 0
