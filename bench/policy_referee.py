#!/usr/bin/env python3
"""The policy referee: libCacheSim's replacement policies and larch's, run on exactly the
same block-request streams, at cache sizes of 0.1%, 1% and 10% of each trace's footprint,
side by side in one table.

    bench/policy_referee.py [--traces DIR] [--work DIR] [--larch BIN] [--expander BIN]
                            [--larch-policies arc,arc-paper] [--only SUBSTR]
                            [--sizes 0.001,0.01,0.1] [--jobs 2]
                            [--json OUT.json] [--markdown OUT.md]

How the streams are made the same: each trace goes once through larch's `expand_trace`
example (target/release/examples/expand_trace), which writes the block requests larch's
replay makes of it (each block a record touches is one request, writes included, blocks
of different volumes kept apart) as a libCacheSim oracleGeneral file: 24-byte records of
time, dense object id, size = the block size, and the request number of the block's next
access (-1 for none), which libCacheSim's Belady needs. Larch replays that file
(`larch sim replay --format oracle-general`) with a cache of n_blocks * block_size bytes.
The block size is the expander's default (512 for the ARC paper's .lis traces, 4096
otherwise). The expanded file's clock is the request number in seconds, so every policy
runs untimed: larch's `arc` and `arc-openzfs`, whose 62 ms rule reads the clock, can give
other numbers here than `larch sim replay` of a timed original (vscsi, csv); the untimed
policies (`arc-paper`, `lru`) give the same.

Object-count mode for libCacheSim: libCacheSim is given a copy of the file with every
size field set to 1 and a cache size of n_blocks objects, not bytes. With byte sizes its
ARC and W-TinyLFU give other numbers than with the same cache counted in blocks (OLTP at
1000 blocks of 512 B: ARC 36.13% in bytes, 38.95% in objects; W-TinyLFU 29.79% and
31.97%; LRU, S3-FIFO and Belady the same either way). In object mode its ARC matches
larch's `arc-paper` (38.944% there), and the table checks that on every cell: the two must
agree within 0.05 points, and a WARNING lists the cells where they do not. A second check
warns of any cell where a policy beats Belady by more than a cache that bypasses can: for
the cells above Belady it also runs Belady with one block more, the bound for such a cache
(the larch policy evicts a block in the step it came when MRU's target is under one block).

n_blocks = max(1, floor(footprint * f + 0.5)) for each size fraction f; cells with fewer
than 10 blocks are marked (such caches are degenerate). libCacheSim's policies run with
their default parameters: LRU, ARC, S3FIFO, WTinyLFU, and Belady (the offline optimum, a
ceiling for the others; it is left out, with a note, if a self-check shows it ignoring the
next-access field). Larch's policies come from --larch-policies (the names the binary's
`--policy` accepts; the run stops at once with a message if the binary rejects one). For
every larch policy after the first, the table gives its margin in points against the
better of S3-FIFO and W-TinyLFU, and the summary counts the cells where each larch policy
reaches that mark. libCacheSim's defaults leave S3-FIFO (under 20 blocks) and W-TinyLFU
(under 100) no working cache: such values are marked, and the summary also gives the
margins over the cells where both rivals work; under 10 and 5 blocks they end with an
error, and the cell reads "err".

The suite (under --traces, default ../shared/traces from the repository root):
arc/OLTP.lis.zst, arc/P3.lis.zst, cloudphysics/cloudPhysicsIO.vscsi, every
lirs/*.trace.gz, the MSR Cambridge, SYSTOR'17 and Tencent CBS samples in format-samples/
(the Tencent one is bzip2, which larch does not read: it is decompressed into the work
directory as a .csv), and the synthetic workloads of bench/gen_workloads.py, generated
into the work directory. A trace that is missing or fails to expand is reported and
skipped.

Expanded files are cached in --work (default /tmp/larch-referee) and reused while the
source trace and the expander binary are unchanged. Independent (trace, size, policy)
cells run --jobs at a time, each in a child process of its own (a libCacheSim error ends
its process). Progress goes to standard error; the markdown table to standard output and
to --markdown, every result to --json.
"""

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import libcachesim as lcs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.dont_write_bytecode = True  # no bench/__pycache__ in the working tree
import trace_suite  # noqa: E402  (bench/trace_suite.py, next to this script)
from trace_suite import file_key, suite  # noqa: E402

# libCacheSim's oracleGeneral record.
ORACLE_GENERAL = np.dtype([("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nx", "<i8")])

# (column label, libcachesim class name)
LCS_POLICIES = [
    ("LRU", "LRU"),
    ("ARC", "ARC"),
    ("S3-FIFO", "S3FIFO"),
    ("W-TinyLFU", "WTinyLFU"),
    ("Belady", "Belady"),
]
# The mark each larch policy is held against: the better of these.
RIVALS = ("S3-FIFO", "W-TinyLFU")
# Larch's policy that must agree with libCacheSim's ARC, and how closely (points).
PAPER_ARC = "arc-paper"
AGREEMENT_POINTS = 0.05
# Caches smaller than this many blocks are marked as degenerate.
DEGENERATE_BLOCKS = 10
# Sizes (objects) under which libCacheSim 0.3.5's defaults give a policy no working
# cache: W-TinyLFU's window is 1% of the cache and admits nothing while it is under one
# object; S3-FIFO's small FIFO is 10% and hits nothing while it holds one object (0 hits
# at 10 to 19 on OLTP, where LRU hits). Under 5 and 10 objects they end with an error.
DEAD_BELOW = {"W-TinyLFU": 100, "S3-FIFO": 20}
# Ties in hit ratio: libCacheSim reports 1 - miss ratio, larch hits / requests.
EPSILON = 1e-9

START = time.monotonic()


def log(message):
    print(f"[{time.monotonic() - START:7.1f}s] {message}", file=sys.stderr, flush=True)


def prepare(name, source, work, expander):
    """Expands one trace (or reuses its cached expansion) and writes its object-mode
    copy. Returns a dict of the trace's facts, with 'error' set if it failed."""
    info = {"name": name, "source": source}
    if not os.path.exists(source):
        info["error"] = "missing"
        return info
    try:
        readable = trace_suite.readable_source(name, source, work, log=log)
    except (OSError, EOFError, ValueError) as e:
        info["error"] = f"decompressing: {e}"
        return info
    stem = os.path.join(work, name.replace("/", "_"))
    byte_file = stem + ".oracleGeneral"
    object_file = stem + ".objects.oracleGeneral"
    meta_file = stem + ".json"
    key = {"source": file_key(readable), "expander": file_key(expander)}
    try:
        with open(meta_file) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = None
    cached = (
        meta is not None
        and meta.get("key") == key
        and all(os.path.exists(p) for p in (byte_file, object_file))
        and os.path.getsize(byte_file) == meta["requests"] * ORACLE_GENERAL.itemsize
        and os.path.getsize(object_file) == meta["requests"] * ORACLE_GENERAL.itemsize
    )
    if not cached:
        p = subprocess.run([expander, readable, byte_file], capture_output=True, text=True)
        if p.returncode != 0:
            info["error"] = "expand_trace failed: " + " ".join(p.stderr.split())[-300:]
            return info
        try:
            requests, footprint, block_size = (int(x) for x in p.stdout.split())
        except ValueError:
            info["error"] = f"expand_trace printed {p.stdout.strip()!r}"
            return info
        records = np.fromfile(byte_file, dtype=ORACLE_GENERAL)
        if len(records) != requests:
            info["error"] = f"expand_trace said {requests} requests but wrote {len(records)}"
            return info
        records["sz"] = 1
        records.tofile(object_file)
        meta = {"key": key, "requests": requests, "footprint": footprint, "block_size": block_size}
        with open(meta_file, "w") as f:
            json.dump(meta, f, indent=1)
    # libCacheSim must see the same number of requests as the expander wrote.
    reader = lcs.TraceReader(object_file, lcs.TraceType.ORACLE_GENERAL_TRACE)
    seen = reader.get_num_of_req()
    del reader  # not reader.close(): closing and then collecting it frees it twice
    if seen != meta["requests"]:
        info["error"] = f"libCacheSim reads {seen} requests of {meta['requests']}"
        return info
    info.update(
        requests=meta["requests"],
        footprint=meta["footprint"],
        block_size=meta["block_size"],
        byte_file=byte_file,
        object_file=object_file,
        cached=cached,
    )
    return info


def n_blocks_for(footprint, fraction):
    return max(1, math.floor(footprint * fraction + 0.5))


# ---------------------------------------------------------------------------------------
# One cell each. Every cell runs in a process of its own, started from a thread of a
# pool: libCacheSim ends the whole process on some configurations (S3FIFO under 10
# objects, WTinyLFU under 5), and that must cost one cell, not the run.


def lcs_cell(object_file, class_name, n_blocks):
    """The body of `--lcs-cell`: one libCacheSim policy over one object-mode file; prints
    its hit ratio as JSON."""
    reader = lcs.TraceReader(object_file, lcs.TraceType.ORACLE_GENERAL_TRACE)
    # An int: libcachesim takes a float cache size as a fraction of the working set.
    cache = getattr(lcs, class_name)(int(n_blocks))
    miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    del cache, reader  # no reader.close(): see prepare()
    print(json.dumps({"hit_ratio": 1.0 - miss_ratio}))


def lcs_argv(object_file, class_name, n_blocks):
    return [sys.executable, os.path.abspath(__file__), "--lcs-cell",
            class_name, str(n_blocks), object_file]


def larch_argv(binary, trace, policy, n_blocks, block_size):
    return [
        binary, "sim", "replay",
        "--trace", trace,
        "--format", "oracle-general",
        "--block-size", str(block_size),
        "--cache-size", str(n_blocks * block_size),
        "--policy", policy,
        "--json", "--no-progress",
    ]


# libCacheSim's log lines: colour codes, a time stamp and a thread id, dropped from errors
# so that equal errors read the same.
LOG_NOISE = re.compile(r"\x1b\[[0-9;]*m|\d\d-\d\d-\d{4} \d\d:\d\d:\d\d\s*|\(tid=\d+\):?\s*")


def run_cell(cell):
    """Runs one cell in a child process; returns hit_ratio and seconds, or error and
    seconds. Never raises, so one bad cell does not stop the run."""
    if cell["engine"] == "libcachesim":
        argv = lcs_argv(cell["object_file"], cell["class_name"], cell["n_blocks"])
    else:
        argv = larch_argv(cell["binary"], cell["byte_file"], cell["policy"],
                          cell["n_blocks"], cell["block_size"])
    started = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        return {"error": str(e), "seconds": 0.0}
    seconds = time.monotonic() - started
    if p.returncode != 0:
        text = " ".join(LOG_NOISE.sub("", p.stderr).split())[-300:]
        return {"error": f"exit {p.returncode}: {text}", "seconds": seconds}
    try:
        answer = json.loads(p.stdout)
    except ValueError:
        return {"error": f"unreadable answer {p.stdout[-200:]!r}", "seconds": seconds}
    if cell["engine"] == "larch" and answer["requests"] != cell["requests"]:
        return {"error": f"larch replayed {answer['requests']} requests, expected "
                         f"{cell['requests']}", "seconds": seconds}
    return {"hit_ratio": answer["hit_ratio"], "seconds": seconds}


def add_belady_one_more(rows, object_files):
    """For each cell where a policy beats Belady, Belady's hit ratio with one block more
    (`belady_one_more`): the bound for a policy that bypasses. Belady's MIN is the optimum
    for caches that keep every missed block at least until the next request; the larch
    policy may evict a block in the same step it took it in (MRU's target is then under
    one block: a loop longer than the cache keeps all c blocks in MFU and each new block
    leaves at once), which is a bypass, and the optimum of a cache that may bypass is at
    most MIN with one block more (it holds c blocks plus the one passing through)."""
    for r in rows:
        ceiling = r["hit"].get("Belady")
        if ceiling is None or not any(
            v is not None and v > ceiling + EPSILON for k, v in r["hit"].items() if k != "Belady"
        ):
            continue
        answer = run_cell({"engine": "libcachesim", "object_file": object_files[r["trace"]],
                           "class_name": "Belady", "n_blocks": r["n_blocks"] + 1})
        r["belady_one_more"] = answer.get("hit_ratio")


# ---------------------------------------------------------------------------------------
# Checks before the run


def write_records(path, ids):
    """A small object-mode oracleGeneral file of the given object ids."""
    records = np.zeros(len(ids), dtype=ORACLE_GENERAL)
    records["t"] = np.arange(len(ids))
    records["id"] = ids
    records["sz"] = 1
    following = {}
    for i in range(len(ids) - 1, -1, -1):
        records["nx"][i] = following.get(ids[i], -1)
        following[ids[i]] = i
    records.tofile(path)


def belady_works(work):
    """Whether lcs.Belady reads the next-access field: on 1 2 3 1 2 3 1 2 3 with room for
    two objects the optimum hits 3 of the 9 requests (LRU none); a Belady that ignored the
    field would not."""
    path = os.path.join(work, "belady-check.oracleGeneral")
    write_records(path, [1, 2, 3] * 3)
    try:
        hits = {}
        for name in ("Belady", "LRU"):
            reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
            hits[name] = round(9 * (1 - getattr(lcs, name)(2).process_trace(reader)[0]))
    except Exception as e:
        return False, f"lcs.Belady failed: {type(e).__name__}: {e}"
    if hits != {"Belady": 3, "LRU": 0}:
        return False, f"lcs.Belady hit {hits['Belady']} of 9 (the optimum is 3; LRU {hits['LRU']})"
    return True, "lcs.Belady uses the next-access field (3 of 9 hits on the check trace, the optimum)"


def check_larch_policies(binary, policies, work):
    """Stops the run if the larch binary rejects one of the policies."""
    path = os.path.join(work, "policy-check.oracleGeneral")
    write_records(path, [0])
    for policy in policies:
        p = subprocess.run(larch_argv(binary, path, policy, 1, 4096), capture_output=True, text=True)
        if p.returncode == 0:
            continue
        known = re.search(r"possible values: ([^\]]*)\]", p.stderr)
        if "invalid value" in p.stderr:
            sys.exit(
                f"error: {binary} has no policy {policy!r}"
                + (f" (it knows: {known.group(1)})" if known else "")
                + ". Build a larch that has it, or leave it out of --larch-policies."
            )
        sys.exit(f"error: {binary} failed with policy {policy!r}: {p.stderr.strip()}")


# ---------------------------------------------------------------------------------------
# Report


def percent(ratio):
    return "err" if ratio is None else f"{100 * ratio:.2f}"


def size_label(fraction):
    return f"{100 * fraction:g}%"


def larch_label(policy):
    return f"larch `{policy}`"


def dead(row, label):
    """Whether a libCacheSim policy's defaults leave it no working cache at this size
    (it then hits nothing, or nearly: measured on OLTP and lirs/cs, see DEAD_BELOW)."""
    return row["n_blocks"] < DEAD_BELOW.get(label, 0)


def rivals_live(row):
    return all(row["hit"].get(r) is not None and not dead(row, r) for r in RIVALS)


def margin(row, policy):
    """Points by which the larch policy beats the better rival (negative: it loses)."""
    mine = row["hit"].get(larch_label(policy))
    rivals = [row["hit"].get(r) for r in RIVALS]
    if mine is None or any(r is None for r in rivals):
        return None
    return 100 * (mine - max(rivals))


def arc_gap(row):
    mine, theirs = row["hit"].get(larch_label(PAPER_ARC)), row["hit"].get("ARC")
    if mine is None or theirs is None:
        return None
    return abs(100 * (mine - theirs))


def where(row):
    return f"{row['trace']} {size_label(row['fraction'])} ({row['n_blocks']:,} blocks)"


def margin_facts(margins):
    """Count of margins >= 0, worst and where, mean, over [(margin, row)]."""
    worst, worst_row = min(margins, key=lambda x: x[0])
    return {
        "cells": len(margins),
        "at_least_rivals": sum(1 for m, _ in margins if m >= -100 * EPSILON),
        "worst_margin_points": worst,
        "worst_at": where(worst_row),
        "mean_margin_points": sum(m for m, _ in margins) / len(margins),
    }


def summarize(rows, larch_policies):
    """The summary lines (markdown), warnings, and their facts (for the JSON)."""
    lines, facts = [], {}
    for policy in larch_policies:
        margins = [(margin(r, policy), r) for r in rows]
        margins = [(m, r) for m, r in margins if m is not None]
        if not margins:
            lines.append(f"- {larch_label(policy)}: no cells to compare.")
            continue
        every = margin_facts(margins)
        big = [(m, r) for m, r in margins if r["n_blocks"] >= DEGENERATE_BLOCKS]
        live = [(m, r) for m, r in margins if rivals_live(r)]
        text = (
            f"- {larch_label(policy)}: >= max(S3-FIFO, W-TinyLFU) in {every['at_least_rivals']} "
            f"of {every['cells']} cells"
        )
        if big and len(big) != len(margins):
            text += (f" ({margin_facts(big)['at_least_rivals']} of {len(big)} with >= "
                     f"{DEGENERATE_BLOCKS} blocks)")
        text += f"; worst margin {every['worst_margin_points']:+.2f} points at {every['worst_at']}."
        fact = {"all": every}
        if big:
            fact[f"at_least_{DEGENERATE_BLOCKS}_blocks"] = margin_facts(big)
        if live:
            f = margin_facts(live)
            fact["rivals_live"] = f
            text += (
                f" Where both rivals work ({f['cells']} cells): {f['at_least_rivals']} of them, "
                f"worst {f['worst_margin_points']:+.2f} at {f['worst_at']}, "
                f"mean {f['mean_margin_points']:+.2f}."
            )
        lines.append(text)
        facts[policy] = fact

    warnings = []
    if PAPER_ARC in larch_policies:
        gaps = [(arc_gap(r), r) for r in rows]
        gaps = [(g, r) for g, r in gaps if g is not None]
        if gaps:
            top, top_row = max(gaps, key=lambda x: x[0])
            off = [(g, r) for g, r in gaps if g > AGREEMENT_POINTS]
            lines.append(
                f"- Check: |larch `{PAPER_ARC}` - libCacheSim ARC| is at most {top:.3f} points "
                f"over {len(gaps)} cells (at {where(top_row)}); "
                + (f"{len(off)} cells differ by more than {AGREEMENT_POINTS}."
                   if off else f"all within {AGREEMENT_POINTS}.")
            )
            for g, r in off:
                warnings.append(
                    f"WARNING: larch `{PAPER_ARC}` and libCacheSim ARC differ by {g:.3f} points "
                    f"at {where(r)}: {percent(r['hit'][larch_label(PAPER_ARC)])} vs "
                    f"{percent(r['hit']['ARC'])}"
                )
            facts["arc_check"] = {
                "max_gap_points": top, "max_at": where(top_row), "cells": len(gaps),
                "over_limit": [{"at": where(r), "gap_points": g} for g, r in off],
            }
    else:
        lines.append(f"- Check skipped: `{PAPER_ARC}` is not among --larch-policies.")

    # Belady's MIN is the optimum for caches that keep every missed block until the next
    # request; one that may bypass (evict the block it just took in) is bounded by MIN with
    # one block more (add_belady_one_more). Above that, something is wrong.
    beaten, bypassed = [], []
    for r in rows:
        ceiling = r["hit"].get("Belady")
        if ceiling is None:
            continue
        for label, value in r["hit"].items():
            if value is None or value <= ceiling + EPSILON:
                continue
            bound = r.get("belady_one_more")
            if bound is not None and value <= bound + EPSILON:
                bypassed.append((r, label, value, ceiling, bound))
            else:
                beaten.append((r, label, value, ceiling))
    if any(r["hit"].get("Belady") is not None for r in rows):
        lines.append(
            "- Check: Belady >= every other policy in every cell."
            if not beaten else f"- Check: Belady is beaten in {len(beaten)} cells (see the warnings)."
        )
        if bypassed:
            lines.append(
                f"- Above Belady (MIN) in {len(bypassed)} cells, within MIN with one block "
                "more (the bound for a cache that bypasses: the larch policy evicts a block in "
                "the step it came when MRU's target is under one block): "
                + "; ".join(f"{label} at {where(r)} {percent(v)} (MIN {percent(c)}, "
                            f"with one block more {percent(b)})"
                            for r, label, v, c, b in bypassed) + "."
            )
        for r, label, value, ceiling in beaten:
            warnings.append(f"WARNING: {label} beats Belady at {where(r)}: "
                            f"{percent(value)} vs {percent(ceiling)}")
        facts["belady_check"] = {"beaten": [
            {"at": where(r), "policy": label, "hit_ratio": v, "belady": c}
            for r, label, v, c in beaten]}
    return lines, warnings, facts


def table(rows, lcs_labels, larch_policies):
    judged = larch_policies[1:]
    check = PAPER_ARC in larch_policies
    head = ["trace", "requests", "footprint", "size", "blocks"] + lcs_labels
    head += [larch_label(p) for p in larch_policies]
    head += [f"`{p}` − best" for p in judged]
    if check:
        head.append(f"\\|`{PAPER_ARC}` − ARC\\|")
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        blocks = f"{r['n_blocks']:,}" + (" *" if r["n_blocks"] < DEGENERATE_BLOCKS else "")
        cells = [r["trace"], f"{r['requests']:,}", f"{r['footprint']:,}",
                 size_label(r["fraction"]), blocks]
        for label in lcs_labels:
            value = r["hit"].get(label)
            cells.append(percent(value) + (" ‡" if value is not None and dead(r, label) else ""))
        cells += [percent(r["hit"].get(larch_label(p))) for p in larch_policies]
        for p in judged:
            m = margin(r, p)
            cells.append("–" if m is None else f"{m:+.2f}" + ("" if rivals_live(r) else " ‡"))
        if check:
            g = arc_gap(r)
            cells.append("–" if g is None else f"{g:.3f}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def version_line(binary):
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def git_commit():
    try:
        p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True)
        return p.stdout.strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--traces", default=os.path.normpath(os.path.join(REPO, "..", "shared", "traces")),
                    help="root of the shared traces (default: ../shared/traces from the repository)")
    ap.add_argument("--work", default="/tmp/larch-referee",
                    help="where expanded traces are cached (default: %(default)s)")
    ap.add_argument("--larch", default=os.path.join(REPO, "target", "release", "larch"))
    ap.add_argument("--expander", default=os.path.join(REPO, "target", "release", "examples", "expand_trace"))
    ap.add_argument("--larch-policies", default="arc,arc-paper",
                    help="comma-separated larch policies; margins are given for all but the first")
    ap.add_argument("--only", help="run only the traces whose name contains this")
    ap.add_argument("--sizes", default="0.001,0.01,0.1",
                    help="cache sizes as fractions of each trace's footprint (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2, help="cells run at once (default: %(default)s)")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--markdown", help="write the table and summary here")
    # Internal: how each libCacheSim cell runs, in a process of its own.
    ap.add_argument("--lcs-cell", nargs=3, metavar=("CLASS", "BLOCKS", "FILE"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.lcs_cell:
        class_name, n_blocks, object_file = a.lcs_cell
        lcs_cell(object_file, class_name, int(n_blocks))
        return

    larch_policies = [p.strip() for p in a.larch_policies.split(",") if p.strip()]
    if not larch_policies:
        sys.exit("error: --larch-policies is empty")
    try:
        fractions = [float(x) for x in a.sizes.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"error: --sizes must be comma-separated fractions: {a.sizes}")
    if not fractions or not all(0 < f <= 1 for f in fractions):
        sys.exit(f"error: --sizes must be fractions in (0, 1]: {a.sizes}")
    builds = {
        "larch": "cargo build --release -p larch",
        "expander": "cargo build --release -p larch-sim --example expand_trace",
    }
    for what, path in (("larch", a.larch), ("expander", a.expander)):
        if not os.access(path, os.X_OK):
            sys.exit(f"error: no {what} binary at {path} (build it with `{builds[what]}`, or pass --{what})")
    larch_bin, expander = os.path.abspath(a.larch), os.path.abspath(a.expander)
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)

    check_larch_policies(larch_bin, larch_policies, work)
    notes = []
    lcs_policies = list(LCS_POLICIES)
    ok, belady_note = belady_works(work)
    notes.append(belady_note + ("" if ok else "; Belady is left out"))
    if not ok:
        lcs_policies = [p for p in lcs_policies if p[0] != "Belady"]
        log(f"WARNING: {belady_note}; Belady is left out")
    lcs_labels = [label for label, _ in lcs_policies]

    traces = []
    for name, source in suite(os.path.abspath(a.traces), work, log=log):
        if a.only and a.only not in name:
            continue
        info = prepare(name, source, work, expander)
        if "error" in info:
            log(f"{name}: FAILED: {info['error']}")
        else:
            log(f"{name}: {info['requests']:,} requests, {info['footprint']:,} blocks of "
                f"{info['block_size']} B" + (" (cached expansion)" if info["cached"] else ""))
        traces.append(info)
    good = [t for t in traces if "error" not in t]
    if not good:
        sys.exit("error: no trace to run")

    cells = []
    for t in good:
        for fraction in fractions:
            n = n_blocks_for(t["footprint"], fraction)
            base = {"trace": t["name"], "fraction": fraction, "n_blocks": n}
            for label, class_name in lcs_policies:
                cells.append(dict(base, engine="libcachesim", column=label, class_name=class_name,
                                  object_file=t["object_file"], requests=t["requests"]))
            for policy in larch_policies:
                cells.append(dict(base, engine="larch", column=larch_label(policy), policy=policy,
                                  binary=larch_bin, byte_file=t["byte_file"],
                                  block_size=t["block_size"], requests=t["requests"]))
    # Longest first, for a better spread over the pool.
    order = sorted(range(len(cells)), key=lambda i: -cells[i]["requests"])
    log(f"{len(cells)} cells over {len(good)} traces, {a.jobs} at a time")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = {pool.submit(run_cell, cells[i]): i for i in order}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            cell = cells[futures[future]]
            cell.update(future.result())
            outcome = (f"ERROR {cell['error']}" if "error" in cell
                       else f"{100 * cell['hit_ratio']:.2f}%")
            log(f"cell {done}/{len(cells)} {cell['trace']} {size_label(cell['fraction'])} "
                f"({cell['n_blocks']:,} blocks) {cell['column']}: {outcome} "
                f"in {cell['seconds']:.1f}s")

    rows = []
    for t in good:
        for fraction in fractions:
            mine = [c for c in cells if c["trace"] == t["name"] and c["fraction"] == fraction]
            rows.append({
                "trace": t["name"], "requests": t["requests"], "footprint": t["footprint"],
                "block_size": t["block_size"], "fraction": fraction,
                "n_blocks": mine[0]["n_blocks"],
                "hit": {c["column"]: c.get("hit_ratio") for c in mine},
            })
    add_belady_one_more(rows, {t["name"]: t["object_file"] for t in good})
    summary, warnings, facts = summarize(rows, larch_policies)
    runtime = time.monotonic() - START
    failed = [t for t in traces if "error" in t]
    bad_cells = [c for c in cells if "error" in c]

    commit = git_commit()
    md = [
        "# Policy referee: libCacheSim and larch on the same block requests",
        "",
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; larch {version_line(larch_bin)}"
        + (f" at {commit}" if commit else "")
        + f"; libcachesim {getattr(lcs, '__version__', '?')}; numpy {np.__version__}; "
        f"{runtime:.0f} s with {a.jobs} jobs.",
        "",
        "Hit ratios in percent (libCacheSim in object-count mode; larch replaying the same "
        "expanded requests); margins in points against max(S3-FIFO, W-TinyLFU); "
        f"blocks marked * are caches under {DEGENERATE_BLOCKS} blocks (degenerate). "
        "‡: a libCacheSim rival whose defaults leave it no working cache at this size "
        "(W-TinyLFU under 100 blocks: its 1% window is empty and it hits nothing; S3-FIFO "
        "under 20: its 10% small FIFO holds one object and it hits nothing), and margins "
        "against such a rival; err: the cell failed "
        "(libCacheSim ends with an error on S3-FIFO under 10 objects and W-TinyLFU under 5; "
        "see the list below).",
        "",
    ]
    md += table(rows, lcs_labels, larch_policies)
    md += ["", "Summary:", ""] + summary
    md += [f"- {n}" for n in notes]
    if failed:
        md += ["", "Traces left out:", ""]
        md += [f"- {t['name']} ({t['source']}): {t['error']}" for t in failed]
    if bad_cells:
        md += ["", "Cells that failed:", ""]
        groups = {}  # errors that differ only in numbers go together
        for c in bad_cells:
            groups.setdefault((c["column"], re.sub(r"\d+", "#", c["error"])), []).append(c)
        for (column, _), group in groups.items():
            sizes = sorted(c["n_blocks"] for c in group)
            md.append(
                f"- {column}, {len(group)} cell{'s' if len(group) > 1 else ''} of "
                f"{sizes[0]:,} to {sizes[-1]:,} blocks: {group[0]['error']}"
                + (" (the first; the others differ at most in numbers)" if len(group) > 1 else "")
                + ". " + ", ".join(f"{c['trace']} {size_label(c['fraction'])}" for c in group)
            )
    if warnings:
        md += [""] + warnings
    text = "\n".join(md) + "\n"
    print(text)
    for w in warnings:
        log(w)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)
    if a.json:
        paths = ("binary", "object_file", "byte_file")
        with open(a.json, "w") as f:
            json.dump({
                "libcachesim": getattr(lcs, "__version__", None),
                "numpy": np.__version__,
                "larch": version_line(larch_bin),
                "commit": commit,
                "args": vars(a),
                "runtime_seconds": runtime,
                "notes": notes,
                "traces": [{k: v for k, v in t.items() if k not in ("byte_file", "object_file")}
                           for t in traces],
                "cells": [{k: v for k, v in c.items() if k not in paths} for c in cells],
                "rows": rows,
                "summary": facts,
                "warnings": warnings,
            }, f, indent=1)
    log(f"done in {runtime:.1f}s")


if __name__ == "__main__":
    main()
