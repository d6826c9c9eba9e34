#!/usr/bin/env python3
"""Replay speed of two policies on the same trace, measured in alternating pairs.

`larch sim replay` runs the trace once under each policy in turn, PAIRS times; the
answer is the median of the pairs' speed ratios (requests per second, the second policy
over the first) with its quartiles, and each policy's median speed. Alternating pairs
and a median of ratios, not one run of each, because this VM's speed drifts by 10% or
more between runs a minute apart: a pair shares the drift.

    python3 bench/replay_speed.py --trace /tmp/larch-referee/arc_P3.oracleGeneral \\
        --block-size 512 --cache-size 39042048 --pairs 20

The referee's expanded traces (bench/policy_referee.py, in /tmp/larch-referee by default)
are oracleGeneral files; BENCHMARKS.md, "Issue 40", has the sizes used.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def speed(binary, trace, fmt, block_size, cache_size, policy):
    """Requests per second of one replay, and its hit ratio."""
    argv = [binary, "sim", "replay", "--trace", trace, "--format", fmt,
            "--block-size", str(block_size), "--cache-size", str(cache_size),
            "--policy", policy, "--json", "--no-progress"]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(argv)} failed: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    return d["requests"] / d["elapsed_seconds"], d["hit_ratio"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--format", default="oracle-general")
    ap.add_argument("--block-size", type=int, required=True)
    ap.add_argument("--cache-size", type=int, required=True, help="bytes")
    ap.add_argument("--policies", default="arc,larch",
                    help="two policies, comma-separated; the ratio is the second's speed "
                         "over the first's (default: arc,larch)")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--larch", default=os.path.join(ROOT, "target", "release", "larch"))
    a = ap.parse_args()
    first, second = a.policies.split(",")
    runs = {first: [], second: []}
    hits = {}
    for i in range(a.pairs):
        for policy in (first, second):
            rate, hit = speed(a.larch, a.trace, a.format, a.block_size, a.cache_size, policy)
            runs[policy].append(rate)
            hits[policy] = hit
        print(f"pair {i + 1}/{a.pairs}: {runs[second][-1] / runs[first][-1]:.3f}",
              file=sys.stderr)
    ratios = [y / x for x, y in zip(runs[first], runs[second])]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    print(json.dumps({
        "trace": a.trace, "cache_size": a.cache_size, "pairs": a.pairs,
        "median_ratio": round(statistics.median(ratios), 3),
        "quartiles": [round(q1, 3), round(q3, 3)],
        "median_requests_per_second": {p: round(statistics.median(v)) for p, v in runs.items()},
        "hit_ratio": hits,
    }, indent=1))


if __name__ == "__main__":
    main()
