#!/usr/bin/env python3
"""L2ARC admission on the policy suite: every trace replayed by `larch sim run` with a cache
device, with the feed as OpenZFS feeds (`l2arc_admit=0`) and with larch's admission rule
(`l2arc_admit=1`: only blocks read at least twice lately), side by side: bytes fed, bytes
fed and overwritten unread ("wasted feed"), the L2 hit ratio over the whole run, and the
DRAM of the reuse sketch.

    bench/l2_admission.py [--traces DIR] [--work DIR] [--larch BIN] [--expander BIN]
                          [--only SUBSTR] [--arc-share 0.01] [--l2-share 0.1]
                          [--policy arc] [--set NAME=VALUE ...] [--jobs 2]
                          [--json OUT.json] [--markdown OUT.md]

The suite is the policy referee's (bench/trace_suite.py: the ARC paper's OLTP and P3,
CloudPhysics, the LIRS traces, the MSR / SYSTOR / Tencent samples, the generated
workloads). Each trace's footprint F, in 4 KiB blocks, comes from the `expand_trace`
example (cached in --work); the pool replaying it has an ARC of --arc-share of F (at
least 256 blocks, 16 per shard) and one SSD cache device of --l2-share of F (at least four
times the ARC), 4 KiB blocks, no metadata model (a larch volume on a file), the default
8-disk primary, and the trace's own clock when it has one (else 20 closed-loop clients).

The L2 hit ratio is L2 hits / (L2 hits + L2 misses): the block reads that missed the ARC
and were served from the cache device, over those that missed it with the device in use.
Wasted feed is what the daemon's `l2_wasted_feed_bytes` counts: copies the device's evict
hand overwrote before any read of them (copies still on the device at the end are not
counted either way).
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.dont_write_bytecode = True  # no bench/__pycache__ in the working tree
import trace_suite  # noqa: E402  (bench/trace_suite.py, next to this script)

BLOCK = 4096
MIN_ARC_BLOCKS = 256
MIN_L2_OVER_ARC = 4
START = time.monotonic()


def log(message):
    print(f"[{time.monotonic() - START:7.1f}s] {message}", file=sys.stderr, flush=True)


def footprint(name, source, work, expander):
    """(requests, footprint in BLOCK blocks) of a trace, cached in work."""
    readable = trace_suite.readable_source(name, source, work, log=log)
    meta_file = os.path.join(work, name.replace("/", "_") + f".{BLOCK}.json")
    key = {"source": trace_suite.file_key(readable), "expander": trace_suite.file_key(expander)}
    try:
        with open(meta_file) as f:
            meta = json.load(f)
        if meta.get("key") == key:
            return readable, meta["requests"], meta["footprint"]
    except (OSError, ValueError, KeyError):
        pass
    scratch = meta_file + ".oracleGeneral.tmp"
    try:
        p = subprocess.run(
            [expander, readable, scratch, str(BLOCK)], capture_output=True, text=True
        )
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
    if p.returncode != 0:
        raise RuntimeError("expand_trace failed: " + " ".join(p.stderr.split())[-300:])
    requests, blocks, _ = (int(x) for x in p.stdout.split())
    with open(meta_file, "w") as f:
        json.dump({"key": key, "requests": requests, "footprint": blocks}, f, indent=1)
    return readable, requests, blocks


def run_cell(cell):
    argv = [
        cell["larch"], "sim", "run",
        "--workload", "trace:" + cell["source"],
        "--block", str(BLOCK),
        "--volume", "3T",
        "--arc", str(cell["arc_bytes"]),
        "--cache", f"ssd:capacity={cell['l2_bytes']}",
        "--metadata", "off",
        "--duration", "10000h",
        "--json", "--quiet",
        "--set", f"zfs_arc_policy={cell['policy']}",
        "--set", f"l2arc_admit={cell['admit']}",
    ]
    for s in cell["sets"]:
        argv += ["--set", s]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        return dict(cell, error=" ".join(p.stderr.split())[-300:])
    s = json.loads(p.stdout)
    lookups = s["l2_hits"] + s["l2_misses"]
    return dict(
        cell,
        seconds=time.monotonic() - t0,
        l2_write_bytes=s["l2_write_bytes"],
        l2_wasted_bytes=s["l2_wasted_bytes"],
        l2_hits=s["l2_hits"],
        l2_misses=s["l2_misses"],
        l2_hit_ratio=s["l2_hits"] / lookups if lookups else 0.0,
        arc_hits=s["arcstats"]["demand_data_hits"],
        arc_misses=s["arcstats"]["demand_data_misses"],
        reuse_sketch_bytes=s["reuse_sketch_bytes"],
        ended=s["trace"]["ended"],
    )


def mib(b):
    return f"{b / (1 << 20):.1f}"


def table(rows):
    lines = [
        "| trace | footprint | ARC | L2 | fed (MiB) off / on | wasted (MiB) off / on | wasted change | L2 hit % off / on | L2 hits off / on | sketch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        off, on = r["off"], r["on"]
        if "error" in off or "error" in on:
            lines.append(f"| {r['name']} | error: {off.get('error') or on.get('error')} |")
            continue
        change = (
            f"{100 * (on['l2_wasted_bytes'] / off['l2_wasted_bytes'] - 1):+.0f}%"
            if off["l2_wasted_bytes"]
            else "–"
        )
        lines.append(
            f"| {r['name']} | {r['footprint']:,} | {off['arc_bytes'] // BLOCK:,} | "
            f"{off['l2_bytes'] // BLOCK:,} | {mib(off['l2_write_bytes'])} / {mib(on['l2_write_bytes'])} | "
            f"{mib(off['l2_wasted_bytes'])} / {mib(on['l2_wasted_bytes'])} | {change} | "
            f"{100 * off['l2_hit_ratio']:.2f} / {100 * on['l2_hit_ratio']:.2f} | "
            f"{off['l2_hits']:,} / {on['l2_hits']:,} | {on['reuse_sketch_bytes'] // 1024:,} KiB |"
        )
    return "\n".join(lines)


def summary(rows):
    good = [r for r in rows if "error" not in r["off"] and "error" not in r["on"]]
    off_w = sum(r["off"]["l2_wasted_bytes"] for r in good)
    on_w = sum(r["on"]["l2_wasted_bytes"] for r in good)
    off_h = sum(r["off"]["l2_hits"] for r in good)
    on_h = sum(r["on"]["l2_hits"] for r in good)
    halved = [
        r["name"]
        for r in good
        if r["off"]["l2_wasted_bytes"] and r["on"]["l2_wasted_bytes"] * 2 <= r["off"]["l2_wasted_bytes"]
    ]
    wasteful = [r["name"] for r in good if r["off"]["l2_wasted_bytes"] > 0]
    lower = [
        f"{r['name']} ({100 * r['off']['l2_hit_ratio']:.2f} -> {100 * r['on']['l2_hit_ratio']:.2f})"
        for r in good
        if r["on"]["l2_hit_ratio"] < r["off"]["l2_hit_ratio"]
    ]
    return "\n".join(
        [
            f"- wasted feed over the suite: {mib(off_w)} MiB off, {mib(on_w)} MiB on "
            f"({100 * (on_w / off_w - 1) if off_w else 0:+.1f}%)",
            f"- L2 hits over the suite: {off_h:,} off, {on_h:,} on",
            f"- traces with wasted feed halved or better: {len(halved)} of {len(wasteful)} that waste any",
            f"- traces whose L2 hit ratio is lower with admission: {len(lower)}"
            + (": " + ", ".join(lower) if lower else ""),
        ]
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=os.path.join(REPO, "..", "shared", "traces"))
    ap.add_argument("--work", default="/tmp/larch-referee")
    ap.add_argument("--larch", default=os.path.join(REPO, "target", "release", "larch"))
    ap.add_argument(
        "--expander", default=os.path.join(REPO, "target", "release", "examples", "expand_trace")
    )
    ap.add_argument("--only", default="")
    ap.add_argument("--arc-share", type=float, default=0.01)
    ap.add_argument("--l2-share", type=float, default=0.1)
    ap.add_argument("--policy", default="arc")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    for tool in (args.larch, args.expander):
        if not os.access(tool, os.X_OK):
            sys.exit(
                f"{tool} is missing: cargo build --release -p larch -p larch-sim --example expand_trace"
            )
    os.makedirs(args.work, exist_ok=True)
    cells, rows = [], []
    for name, source in trace_suite.suite(os.path.abspath(args.traces), args.work, log=log):
        if args.only not in name:
            continue
        if not os.path.exists(source):
            log(f"{name}: missing, skipped")
            continue
        try:
            readable, requests, blocks = footprint(name, source, args.work, args.expander)
        except (RuntimeError, OSError, ValueError) as e:
            log(f"{name}: {e}")
            continue
        arc_blocks = max(MIN_ARC_BLOCKS, round(blocks * args.arc_share))
        l2_blocks = max(MIN_L2_OVER_ARC * arc_blocks, round(blocks * args.l2_share))
        row = {"name": name, "requests": requests, "footprint": blocks}
        rows.append(row)
        for admit in (0, 1):
            cells.append(
                dict(
                    name=name,
                    source=readable,
                    larch=args.larch,
                    arc_bytes=arc_blocks * BLOCK,
                    l2_bytes=l2_blocks * BLOCK,
                    policy=args.policy,
                    admit=admit,
                    sets=args.sets,
                )
            )
    by_name = {r["name"]: r for r in rows}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for result in pool.map(run_cell, cells):
            by_name[result["name"]]["on" if result["admit"] else "off"] = result
            log(f"{result['name']} admit={result['admit']}: "
                + (result.get("error") or f"{result['seconds']:.1f} s"))
    out = table(rows) + "\n\n" + summary(rows) + "\n"
    print(out)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
