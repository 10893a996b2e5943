#!/usr/bin/env bash
# The H200 checks of issue 18 (record and replay), one device call:
#   1. the GPU tests (kernel, timing, measure, replay);
#   2. `solci measure` of planted kernels through record and replay, in the sandbox: the project's kernel,
#      PyTorch ops instead of launches, a launch sequence that changes, the two forgeries of
#      tests/support/hostile.py (messages rewritten in place; forged reply lines on every descriptor);
#   3. REPLAY_TABLE=1: the project's kernel replayed and called (--direct) side by side, twice each, all 16 cases.
# Needs .whl (duckdb, ruptures for Python 3.12) and .sandbox (bwrap + its libraries). Logs go to $OUT.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
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
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
SB=${SANDBOX:-bwrap}
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== 1. GPU tests"
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/harness/test_replay_gpu.py tests/kernel/test_kernel_gpu.py \
    tests/harness/test_timing.py tests/harness/test_measure.py -m gpu 2>&1 | tail -15 | tee "$OUT/gpu_tests.log"
fi
echo "== 2. planted kernels, recorded and replayed (sandbox $SB)"
python3 - <<'PY' > /tmp/forge_impls.txt
from pathlib import Path
from tests.support import hostile
for name in ("FORGE_MESSAGES", "FORGE_FD"):
    print(name, hostile.forging_kernel(Path("/tmp/forge"), getattr(hostile, name)))
PY
F=tests/support/fake_kernels.py
CASES=${PLANT_CASES:-"1,256 8,1024"}
run() {
  local tag=$1; shift
  s=$(date +%s)
  # shellcheck disable=SC2086
  timeout 300 python3 -m ci.cli measure --sandbox "$SB" --cases $CASES --out "$OUT/$tag.json" "$@" 2>"$OUT/$tag.err"
  echo "$tag: exit $? ($(( $(date +%s) - s )) s)"
  python3 - "$OUT/$tag.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("   no document:", exc); sys.exit()
print("   measured_by", d.get("measured_by"), "suite", d["suite"]["status"], d["suite"]["geomean_us"])
for c in d["cases"]:
    err = (c["error"] or "").strip().splitlines()
    print(f"   {c['case']:>10} {c['status']:<9} {c['median_us']}  {err[0][:220] if err else ''}")
PY
}
run project
# kernels given as files (--impl FILE.py:FUNCTION) are this checkout's, outside any candidate tree: no sandbox
SB=none run torch_ops --impl "$F:good"
SB=none run alternates --impl "$F:alternates"
SB=none run own_scratch --impl "$F:own_scratch"
while read -r name impl; do SB=none run "$name" --impl "$impl"; done < /tmp/forge_impls.txt
if [ -n "${REPLAY_TABLE:-}" ]; then
  echo "== 3. replayed vs called, side by side"
  for i in 1 2; do
    CASES=all run "table_replay_$i"
    CASES=all run "table_direct_$i" --direct
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/replay_vs_called.txt"
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {k: [json.loads((out / f"table_{k}_{i}.json").read_text()) for i in (1, 2)] for k in ("replay", "direct")}
print("| case | replayed (us) | called (us) | replayed / called | run-to-run spread |")
print("| --- | ---: | ---: | ---: | ---: |")
ratios = []
for j, c in enumerate(runs["replay"][0]["cases"]):
    rep = [r["cases"][j]["median_us"] for r in runs["replay"]]
    dire = [r["cases"][j]["median_us"] for r in runs["direct"]]
    if None in rep or None in dire:
        print(f"| {c['case']} | {rep} | {dire} | - | - |"); continue
    r, d = statistics.fmean(rep), statistics.fmean(dire)
    spread = max(abs(rep[0] - rep[1]) / r, abs(dire[0] - dire[1]) / d)
    ratios.append(r / d)
    print(f"| {c['case']} | {r:.2f} | {d:.2f} | {r / d:.4f} | {spread * 100:.2f} % |")
g = statistics.geometric_mean(ratios) if ratios else float("nan")
print(f"geomean replayed / called: {g:.4f} over {len(ratios)} cases (NVIDIA H200, CUPTI span, runs R D R D)")
for k in runs:
    print(k, [round(r["wall_s"], 1) for r in runs[k]], "s per 16-case run")
PY
fi
cd "$OUT" && tar czf docs.tgz ./*.json ./*.err 2>/dev/null && rm -f ./*.json ./*.err
