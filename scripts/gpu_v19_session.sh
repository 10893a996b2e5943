#!/usr/bin/env bash
# One device-tool call for issue 21's Gluon sweeps (GPU machine, repository root): the Gluon variants beside v18, the
# tile-language kernel and cuBLAS (scripts/bench_gluon_v19.py); the per-bucket winners written into GLUON_TABLE of
# this copy (scripts/apply_gluon_selection.py); then the GPU tests and the 16-case bench on that code.
# Usage: bash scripts/gpu_v19_session.sh [sweep] [apply] [tests] [bench] [confirm] [floor]   (no step named: the
# first four; confirm: tests and bench only if the sweep's selection, $OUT/select.json, moved a bucket off its
# baseline; floor: kernel/NOTES.md items 39 and 41, the floor's loop and clock and the io floors (the first fill, the
# plans' boundaries, the last store, a split plan's fix-ups, a loader warp's loads) at M = 1024 and 2048 beside the
# trace of the table's entry at M = 1024; any other word: one line on stderr, exit 2, nothing run)
# Environment: SWEEP_ARGS (more arguments of the sweep: --only NAMES, --timed B,S ...), TAG (the logs' prefix,
# default v19), SWEEP_TIMEOUT / TESTS_TIMEOUT (s; default 300 / 120).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -u
steps=${*:-sweep apply tests bench}
for step in $steps; do  # a misspelt step is named before anything runs: a device call is too dear to spend on nothing
  case $step in
    sweep | apply | tests | bench | confirm | floor) ;;
    *) echo "gpu_v19_session.sh: no step '$step' (steps: sweep apply tests bench confirm floor)" >&2; exit 2 ;;
  esac
done
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TAG=${TAG:-v19}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
for step in $steps; do
  start=$SECONDS
  case $step in
    sweep) timeout "${SWEEP_TIMEOUT:-300}" python3 scripts/bench_gluon_v19.py --out "$OUT" --select "$OUT/select.json" \
             --budget-s 230 ${SWEEP_ARGS:-} 2>&1 | grep -v -i "warn" | tee "$OUT/${TAG}_sweep.log" ;;
    apply) [ -f "$OUT/select.json" ] && python3 scripts/apply_gluon_selection.py "$OUT/select.json" \
             && grep -n "^    [0-9]*: (GluonConfig" kernel/gluon_backward.py ;;
    tests) timeout "${TESTS_TIMEOUT:-120}" python3 -m pytest --noconftest -q -m gpu tests/kernel \
             tests/harness/test_replay_gpu.py 2>&1 | tee "$OUT/${TAG}_gpu_tests.log" | tail -n 15 ;;
    confirm) if python3 scripts/bench_gluon_v19.py --table-changed "$OUT/select.json"; then
               bash "$0" tests bench  # the table changed: its GPU tests and the 16 cases
             else
               echo "confirm: the selection kept every bucket's entry; no GPU tests, no 16 cases"
             fi ;;
    floor) PYTHONPATH=$PWD:$PWD/scripts timeout 200 python3 scripts/diag_floor.py --ms 1024,2048 --io --sink 6 2>&1 \
             | grep -v -i "warn" | tee "$OUT/${TAG}_floor.log" | tail -n 30
           timeout 200 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants coop --kinds both --reps 10 2>&1 \
             | grep -v -i "warn" | tee "$OUT/${TAG}_trace.log" | tail -n 12 ;;
    bench) timeout 170 python3 scripts/solci_bench_direct.py --csv "$OUT/${TAG}_bench.csv" 2>&1 | grep -v -i "warn" \
             | tee "$OUT/${TAG}_bench.log" | tail -n 32 ;;
  esac
  echo "step $step: $((SECONDS - start)) s"
done
