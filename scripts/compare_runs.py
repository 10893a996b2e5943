"""Compare the per-case kernel medians of two `solci measure` result files (the noise floor check).

    python scripts/compare_runs.py RUN1.json RUN2.json
Prints each case's two medians and their difference; exit 1 when a case with M >= 1024 differs by more than 3 %
(scripts/gpu_final_session.sh runs it on two back-to-back measurements of the same commit).
"""

import argparse
import json
import sys


def medians(path: str) -> tuple[dict[str, tuple[int, float]], dict]:
    with open(path) as fh:
        doc = json.load(fh)
    return {c["case"]: (c["m"], c["median_us"]) for c in doc["cases"] if c["median_us"]}, doc


def main(a: str, b: str) -> int:
    ma, da = medians(a)
    mb, db = medians(b)
    print(f"{'case':<10}{'M':>6}{'run 1':>9}{'run 2':>9}{'diff %':>8}")
    worst = 0.0
    for case, (m, x) in ma.items():
        if case not in mb:
            continue
        y = mb[case][1]
        d = (y / x - 1) * 100
        if m >= 1024:
            worst = max(worst, abs(d))
        print(f"{case:<10}{m:>6}{x:>9.1f}{y:>9.1f}{d:>+8.2f}")
    print(
        f"largest |diff| for M >= 1024: {worst:.2f}%  "
        f"(suite geomean {da['suite']['geomean_us']:.1f} vs {db['suite']['geomean_us']:.1f} us; "
        f"wall {da['wall_s']:.0f} s vs {db['wall_s']:.0f} s)"
    )
    return 0 if worst <= 3.0 else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first", help="a result file of `solci measure --out`")
    ap.add_argument("second", help="another one, of the same commit on the same machine")
    args = ap.parse_args()
    sys.exit(main(args.first, args.second))
