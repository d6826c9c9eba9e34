#!/usr/bin/env python3
"""Synthetic block traces for the policy referee (bench/policy_referee.py), in larch's
`text` trace format: one block number per line, each line one request.

    bench/gen_workloads.py DIR [--force]

Writes into DIR (created if missing) the four workloads below, each only if its file is
missing or with --force. Every workload draws from its own numpy Generator with a fixed
seed, so the files are the same on every run (for a given numpy version's generator
algorithms: PCG64 and `Generator.random`/`permutation`/`choice`, which numpy keeps
stable).

Zipf(s) over n items here means item k (k = 1..n) is drawn with probability proportional
to k^-s, by inverting the cumulative distribution (numpy's own `zipf` needs s > 1 and an
unbounded support). Ranks are placed on block numbers through a random permutation, so
the most popular block is not block 0.

zipf-0.9.txt   Zipf(0.9) over 100,000 blocks, 1,000,000 requests (seed 901); 91,304
               blocks are drawn at least once.
zipf-1.2.txt   Zipf(1.2) over 100,000 blocks, 1,000,000 requests (seed 1201); 46,506
               blocks drawn.
scan-loop.txt  1,000,000 requests in 10 periods of 100,000 (seed 3001). A period is
               80,000 mixed requests, then 20,000 scanned ones. The mixed part holds
               50,000 draws from a Zipf(0.9) hot set of 20,000 blocks (blocks
               0..19,999, one ranking for the whole trace) and one full in-order pass
               over a loop of 30,000 blocks (blocks 1,000,000..1,029,999, the same every
               period), at random positions: a random permutation picks which 30,000 of
               the 80,000 slots are the loop's, and the loop fills them in order. The
               scan is a sequential run of 20,000 blocks never seen before or after
               (from block 2,000,000 on, each period continuing where the last one
               stopped). Footprint 249,910 blocks: 30,000 loop, 200,000 scanned once,
               and the 19,910 of the 20,000 hot blocks that are ever drawn.
shifting.txt   1,000,000 requests in 5 phases of 200,000 (seed 4001). Each phase draws
               Zipf(0.9) over a working set of 20,000 blocks, ranked by a fresh random
               permutation. The first set is blocks 0..19,999; each later set keeps a
               random half (10,000) of the previous set and adds 10,000 blocks never used
               before (numbered on from the highest so far). Footprint 57,381 blocks of
               the 60,000 the sets hold (the rarest are never drawn).
"""

import argparse
import os
import sys

import numpy as np

ZIPF_BLOCKS = 100_000
REQUESTS = 1_000_000

SCAN_LOOP_PERIODS = 10
SCAN_LOOP_HOT_BLOCKS = 20_000
SCAN_LOOP_HOT_REQUESTS = 50_000  # per period
SCAN_LOOP_LOOP_BLOCKS = 30_000  # one full pass per period
SCAN_LOOP_SCAN_BLOCKS = 20_000  # per period, never reused
SCAN_LOOP_LOOP_BASE = 1_000_000
SCAN_LOOP_SCAN_BASE = 2_000_000

SHIFT_PHASES = 5
SHIFT_PHASE_REQUESTS = 200_000
SHIFT_SET_BLOCKS = 20_000
SHIFT_KEPT = 10_000  # blocks of the previous set kept in the next (50%)


def zipf_ranks(rng, n_items, s, n_draws):
    """n_draws ranks in 0..n_items-1, rank k (0-based) drawn with probability
    proportional to (k + 1)^-s."""
    weights = np.arange(1, n_items + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n_draws), side="right")
    # A draw of exactly 1.0 cannot happen (random() is in [0, 1)); rounding in the
    # cumulative sum could still leave its last entry a hair under 1.
    return np.minimum(ranks, n_items - 1)


def zipf_over(rng, blocks, s, n_draws):
    """n_draws requests over the given blocks, Zipf(s) popularity, ranks assigned to the
    blocks by a random permutation."""
    blocks = np.asarray(blocks, dtype=np.int64)
    by_rank = rng.permutation(blocks)
    return by_rank[zipf_ranks(rng, len(blocks), s, n_draws)]


def zipf_workload(s, seed):
    rng = np.random.default_rng(seed)
    return zipf_over(rng, np.arange(ZIPF_BLOCKS), s, REQUESTS)


def scan_loop_workload(seed=3001):
    rng = np.random.default_rng(seed)
    hot_blocks = np.arange(SCAN_LOOP_HOT_BLOCKS)
    loop = SCAN_LOOP_LOOP_BASE + np.arange(SCAN_LOOP_LOOP_BLOCKS, dtype=np.int64)
    mixed_len = SCAN_LOOP_HOT_REQUESTS + SCAN_LOOP_LOOP_BLOCKS
    next_scan = SCAN_LOOP_SCAN_BASE
    # One ranking of the hot set for the whole trace: the hot set is stable.
    hot_by_rank = rng.permutation(hot_blocks)
    parts = []
    for _ in range(SCAN_LOOP_PERIODS):
        is_loop = np.zeros(mixed_len, dtype=bool)
        is_loop[rng.permutation(mixed_len)[:SCAN_LOOP_LOOP_BLOCKS]] = True
        mixed = np.empty(mixed_len, dtype=np.int64)
        mixed[is_loop] = loop  # in order: the slots are taken left to right
        mixed[~is_loop] = hot_by_rank[
            zipf_ranks(rng, SCAN_LOOP_HOT_BLOCKS, 0.9, SCAN_LOOP_HOT_REQUESTS)
        ]
        parts.append(mixed)
        parts.append(next_scan + np.arange(SCAN_LOOP_SCAN_BLOCKS, dtype=np.int64))
        next_scan += SCAN_LOOP_SCAN_BLOCKS
    return np.concatenate(parts)


def shifting_workload(seed=4001):
    rng = np.random.default_rng(seed)
    current = np.arange(SHIFT_SET_BLOCKS, dtype=np.int64)
    next_new = SHIFT_SET_BLOCKS
    parts = []
    for phase in range(SHIFT_PHASES):
        if phase > 0:
            kept = rng.choice(current, size=SHIFT_KEPT, replace=False)
            added = next_new + np.arange(SHIFT_SET_BLOCKS - SHIFT_KEPT, dtype=np.int64)
            next_new += len(added)
            current = np.concatenate([kept, added])
        parts.append(zipf_over(rng, current, 0.9, SHIFT_PHASE_REQUESTS))
    return np.concatenate(parts)


# File name -> function making its block numbers.
WORKLOADS = {
    "zipf-0.9.txt": lambda: zipf_workload(0.9, seed=901),
    "zipf-1.2.txt": lambda: zipf_workload(1.2, seed=1201),
    "scan-loop.txt": scan_loop_workload,
    "shifting.txt": shifting_workload,
}


def write_text_trace(path, blocks):
    """Writes one block number per line, through a temporary file so that an
    interrupted run leaves no partial trace behind."""
    tmp = path + ".tmp"
    with open(tmp, "w") as out:
        out.write("\n".join(map(str, blocks.tolist())))
        out.write("\n")
    os.replace(tmp, path)


def generate(directory, force=False, log=None):
    """Writes every workload into directory (missing ones only unless force) and returns
    their paths, in WORKLOADS order."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, make in WORKLOADS.items():
        path = os.path.join(directory, name)
        if force or not os.path.exists(path):
            blocks = make()
            write_text_trace(path, blocks)
            if log:
                log(f"wrote {path}: {len(blocks):,} requests, {len(np.unique(blocks)):,} blocks")
        paths.append(path)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    a = ap.parse_args()
    for path in generate(a.directory, a.force, log=lambda m: print(m, file=sys.stderr)):
        print(path)


if __name__ == "__main__":
    main()
