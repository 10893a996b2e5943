#!/usr/bin/env bash
# A short device call: the GPU tests, then `solci measure` of one case through the trusted harness with the
# commit's tree as the candidate, in the bubblewrap sandbox (carried in .sandbox/) and without it.
# Usage (GPU machine, repo root): bash scripts/gpu_probe_session.sh; the logs go to $OUT (default /tmp/out).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=$here:/tmp/site
export PATH=$here/.sandbox/bin:$PATH LD_LIBRARY_PATH=$here/.sandbox/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernel/test_kernel_gpu.py tests/harness/test_timing.py \
  tests/harness/test_measure.py -m gpu 2>&1 | tail -6 | tee "$OUT/gpu_tests.log"
bwrap --ro-bind / / --unshare-all --die-with-parent true && echo "bwrap: ok" || echo "bwrap: FAILS"
rm -rf /tmp/cand && mkdir /tmp/cand && cp -r kernel /tmp/cand/
for sb in bwrap none; do
  s=$(date +%s)
  timeout 200 python3 -m ci.cli measure --cases 1,256 8,1024 --candidate /tmp/cand --sandbox $sb \
    --out "$OUT/probe_$sb.json" > /dev/null 2> "$OUT/probe_$sb.err"
  echo "measure --sandbox $sb: exit $? ($(( $(date +%s) - s )) s)"; tail -4 "$OUT/probe_$sb.err"
  python3 - "$OUT/probe_$sb.json" <<'PY' 2>&1 | tail -8
import json, sys
d = json.load(open(sys.argv[1]))
print("sandbox", d.get("sandbox"), "protocol", d["protocols"][0]["name"], "harness", d.get("harness"))
for c in d["cases"]:
    tel = (c.get("telemetry") or {}).get("before") or {}
    print(c["case"], c["status"], c["median_us"], "clock", tel.get("sm_clock_mhz"), (c["error"] or "")[:600])
PY
done
