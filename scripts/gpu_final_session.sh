#!/usr/bin/env bash
# The end-to-end device call: GPU tests, the benchmark table, `solci measure` twice (noise floor and wall time)
# and one real `solci run` of the runner (local executor) over a commit. Needs .whl (duckdb, ruptures) carried.
# Usage (GPU machine, repo root): bash scripts/gpu_final_session.sh; the logs go to $OUT (default /tmp/out).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
timeout 200 python3 -m pytest -q tests/kernel/test_kernel_gpu.py tests/harness/test_timing.py tests/harness/test_measure.py -m gpu 2>&1 \
  | tail -4 | tee "$OUT/gpu_tests.log"
timeout 150 python3 -m ci.cli bench --csv "$OUT/bench.csv" 2>&1 | grep -v -i warn > "$OUT/bench.log"
for i in 1 2; do
  s=$(date +%s%N)
  timeout 150 python3 -m ci.cli measure --cases all --out "$OUT/r$i.json" 2> "$OUT/measure$i.err" >/dev/null
  echo "measure run $i: exit $? wall $(( ($(date +%s%N) - s) / 1000000 )) ms"
done
python3 scripts/compare_runs.py "$OUT/r1.json" "$OUT/r2.json"
# The runner over a commit: a git repository made from this working tree.
rm -rf /tmp/repo && mkdir /tmp/repo && tar --exclude=./.whl --exclude=./.git -cf - . | tar -C /tmp/repo -xf -
cd /tmp/repo && git init -q -b main && git add -A && git -c user.name=ci -c user.email=ci@local commit -qm "H200 run" \
  && cd - >/dev/null
s=$(date +%s%N)
timeout 200 python3 -m ci.cli run --repo /tmp/repo --commit HEAD --executor local --db /tmp/h.duckdb > "$OUT/run.log" 2>&1
echo "solci run: exit $? wall $(( ($(date +%s%N) - s) / 1000000 )) ms"
python3 -m ci.cli history --db /tmp/h.duckdb >> "$OUT/run.log" 2>&1
python3 -m ci.cli sql --db /tmp/h.duckdb "SELECT count(*) AS runs FROM runs" >> "$OUT/run.log" 2>&1
tail -25 "$OUT/run.log"
cat "$OUT/bench.log" | tail -22
