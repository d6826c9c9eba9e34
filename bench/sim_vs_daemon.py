#!/usr/bin/env python3
"""The simulator checked against the daemon (issue 16): one workload through `larch serve`
(a backing store with larch's injected read latency, a cache-device file, fio's nbd engine)
and through `larch sim run` with device models set to what the daemon's own histograms
measured, and their hit ratios and IOPS side by side, from cold.

    bench/sim_vs_daemon.py [--larch target/release/larch] [--seconds 120] [--latency-ms 4]
                           [--threads 8] [--out FILE.md]

The models: the backing store is `ram:latency_us=L` (larch's latency model sleeps each read
in a thread of its own, so it has no queue), L the backing store's mean read time in the
daemon; the cache device `ram:latency_us=C`, C the cache device's mean read time (verify
included); and every request pays the mean time of an ARC hit at the front end (NBD,
socket, fio). Both run larch's feed and tunables. Prints a table; the figures of a run go
into BENCHMARKS.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def run(argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def series_means(answer, ids, first, last):
    """Mean of each series over the intervals ending in (first, last]."""
    times = answer["times"]
    out = {}
    for i in ids:
        vals = [v for t, v in zip(times, answer["series"].get(i, [])) if first < t <= last and v is not None]
        out[i] = sum(vals) / len(vals) if vals else 0.0
    return out


def window(values, hits, misses):
    h, m = values[hits], values[misses]
    return h / (h + m) if h + m > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--larch", default="target/release/larch")
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--latency-ms", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--arc", default="64M")
    ap.add_argument("--cache", default="512M")
    ap.add_argument("--ads", default="1536M")
    ap.add_argument("--out")
    a = ap.parse_args()
    larch = os.path.abspath(a.larch)
    d = tempfile.mkdtemp(prefix="larch-simcheck-")
    state = os.path.join(d, "pool")
    sock = os.path.join(d, "nbd.sock")
    server = None
    try:
        run([larch, "pool", "create", "check", "--state-dir", state, "--arc-max", a.arc])
        run([larch, "volume", "add", "vol0", "--backing", os.path.join(d, "vol0.img"), "--size", "2G",
             "--volblocksize", "8K", "--read-latency-ms", str(a.latency_ms), "--state-dir", state])
        run([larch, "cache", "add", os.path.join(d, "cache0.img"), "--size", a.cache, "--state-dir", state])
        server = subprocess.Popen([larch, "serve", "--state-dir", state, "--socket", sock, "--http", "127.0.0.1:0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.exists(sock) and os.path.exists(os.path.join(state, "daemon.json")):
                break
            time.sleep(0.1)
        time.sleep(1.5)
        start = int(time.time())
        jobs = max(1, a.threads // 2)
        run(["fio", "--name=check", "--ioengine=nbd", "--uri=nbd+unix:///vol0?socket=" + sock, "--rw=randread",
             "--bs=8k", "--size=" + a.ads, "--numjobs=%d" % jobs, "--iodepth=%d" % (a.threads // jobs),
             "--time_based", "--runtime=%d" % a.seconds, "--norandommap", "--group_reporting"])
        end = int(time.time())
        time.sleep(2)
        ids = ["volume/vol0/read_ops", "arc/hits", "arc/misses", "arc/l2_hits", "arc/l2_misses", "arc/l2_size"]
        exported = json.loads(run([larch, "analytics", "export", "--state-dir", state, "--format", "json",
                                   "--from", str(start), "--to", str(end + 1), "--step", "1",
                                   "--ids", ",".join(ids)]).stdout)
        status = json.loads(run([larch, "status", "--state-dir", state, "--json"]).stdout)
    finally:
        if server:
            server.terminate()
            server.wait()
    vol = status["volumes"][0]
    dev = status["cache_devices"][0]
    front_us = vol["read_arc_latency"]["mean_us"]
    backing_us = vol["backing_read_latency"]["mean_us"]
    cache_us = dev["read_latency"]["mean_us"]
    sim_cmd = [larch, "sim", "run", "--quiet", "--json", "--feed", "larch", "--duration", "%ds" % a.seconds,
               "--arc", a.arc, "--volume", "2G", "--block", "8K", "--ads", a.ads, "--io", "8K",
               "--threads", str(a.threads), "--think", "0", "--primary", "ram:latency_us=%.0f" % backing_us,
               "--cache", "ram:latency_us=%.0f,capacity=%s" % (cache_us, a.cache),
               "--frontend", "%.0fus" % front_us, "-o", os.path.join(d, "sim.json")]
    run(sim_cmd)
    sim = json.load(open(os.path.join(d, "sim.json")))
    rows = []
    third = a.seconds // 3
    for name, lo, hi in [("first third", 0, third), ("middle third", third, 2 * third), ("last third", 2 * third, a.seconds)]:
        dm = series_means(exported, ids, start + lo, start + hi)
        st = [t for t in sim["times"]]
        sm = series_means({"times": st, "series": sim["series"]}, ids, lo, hi)
        rows.append((name, dm, sm))
    lines = ["| window | IOPS daemon | IOPS sim | sim/daemon | ARC hit daemon | ARC hit sim | L2 hit daemon | L2 hit sim | L2 size daemon | L2 size sim |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, dm, sm in rows:
        di, si = dm["volume/vol0/read_ops"], sm["volume/vol0/read_ops"]
        lines.append("| %s | %.0f | %.0f | %.2f | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.0f MiB | %.0f MiB |" % (
            name, di, si, si / di if di else 0,
            100 * window(dm, "arc/hits", "arc/misses"), 100 * window(sm, "arc/hits", "arc/misses"),
            100 * window(dm, "arc/l2_hits", "arc/l2_misses"), 100 * window(sm, "arc/l2_hits", "arc/l2_misses"),
            dm["arc/l2_size"] / 2**20, sm["arc/l2_size"] / 2**20))
    text = ("Models from the daemon's histograms: front end %.0f us (ARC hit), backing read %.0f us, cache read %.0f us.\n"
            "Simulator: `%s`\n\n" % (front_us, backing_us, cache_us, " ".join(os.path.basename(x) if x == larch else x for x in sim_cmd[:-2]))
            + "\n".join(lines) + "\n")
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
