#!/usr/bin/env python3
"""`larch advise` checked end to end (issue 17): a pool served at its smallest size predicts
the hit ratios and IOPS of two bigger configurations, which are then served and measured.

    bench/advise_check.py [--larch target/release/larch] [--latency-ms 4] [--out FILE.md]

One workload throughout: fio random reads (Zipf, theta 0.9) of 8K blocks over 1.5 GiB of a
2 GiB volume whose backing file answers reads `--latency-ms` late, 8 requests in flight
(closed loop). Sizes: S0 = ARC 64 MiB and no L2ARC (where the prediction is made), S1 =
ARC 64 MiB + L2ARC 512 MiB, S2 = ARC 256 MiB + L2ARC 1 GiB. At S0, after `--warm` seconds,
`larch advise --arc A --l2 L --device D --json` predicts S1 and S2; D models the cache device
(a file in the page cache: `ram:latency_us=130`, what issue 16 measured for one). Each of
S1 and S2 is then served from cold for `--seconds`, and its hit ratios and read IOPS are
measured over the last `--measure` seconds (the L2ARC warm by then). Prints a table.
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


def serve(larch, d, arc, cache, latency_ms):
    state = os.path.join(d, "pool")
    sock = os.path.join(d, "nbd.sock")
    shutil.rmtree(state, ignore_errors=True)
    for f in ("vol0.img", "cache0.img"):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    run([larch, "pool", "create", "check", "--state-dir", state, "--arc-max", arc])
    run([larch, "volume", "add", "vol0", "--backing", os.path.join(d, "vol0.img"), "--size", "2G",
         "--volblocksize", "8K", "--read-latency-ms", str(latency_ms), "--state-dir", state])
    if cache:
        run([larch, "cache", "add", os.path.join(d, "cache0.img"), "--size", cache, "--state-dir", state])
    server = subprocess.Popen([larch, "serve", "--state-dir", state, "--socket", sock, "--http", "127.0.0.1:0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        if os.path.exists(sock) and os.path.exists(os.path.join(state, "daemon.json")):
            break
        time.sleep(0.1)
    time.sleep(1)
    return server, state, sock


def fio(sock, seconds):
    return subprocess.Popen(
        ["fio", "--name=check", "--ioengine=nbd", "--uri=nbd+unix:///vol0?socket=" + sock, "--rw=randread",
         "--bs=8k", "--size=1536M", "--random_distribution=zipf:0.9", "--numjobs=4", "--iodepth=2",
         "--time_based", "--runtime=%d" % seconds, "--norandommap", "--group_reporting"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(larch, state, first, last):
    ids = ["volume/vol0/read_ops", "arc/hits", "arc/misses", "arc/l2_hits"]
    answer = json.loads(run([larch, "analytics", "export", "--state-dir", state, "--format", "json",
                             "--from", str(first), "--to", str(last), "--step", "1",
                             "--ids", ",".join(ids)]).stdout)
    mean = {}
    for i in ids:
        vals = [v for v in answer["series"].get(i, []) if v is not None]
        mean[i] = sum(vals) / len(vals) if vals else 0.0
    reads = mean["arc/hits"] + mean["arc/misses"]
    return {
        "arc": mean["arc/hits"] / reads if reads else 0.0,
        "l2": mean["arc/l2_hits"] / reads if reads else 0.0,
        "iops": mean["volume/vol0/read_ops"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--larch", default="target/release/larch")
    ap.add_argument("--latency-ms", type=int, default=4)
    ap.add_argument("--warm", type=int, default=900)
    ap.add_argument("--seconds", type=int, default=420)
    ap.add_argument("--measure", type=int, default=60)
    ap.add_argument("--device", default="ram:latency_us=130")
    ap.add_argument("--out")
    a = ap.parse_args()
    larch = os.path.abspath(a.larch)
    d = tempfile.mkdtemp(prefix="larch-advise-")
    sizes = [("S0", "64M", None), ("S1", "64M", "512M"), ("S2", "256M", "1G")]
    predicted = {}
    measured = {}
    try:
        server, state, sock = serve(larch, d, "64M", None, a.latency_ms)
        load = fio(sock, a.warm + 20)
        time.sleep(a.warm)
        for name, arc, l2 in sizes:
            answer = json.loads(run([larch, "advise", "--state-dir", state, "--json", "--arc", arc,
                                     "--l2", l2 or "0", "--device", a.device]).stdout)
            predicted[name] = answer["asked"]
            if name == "S0":
                advice_s0 = answer
        now = int(time.time())
        measured["S0"] = measure(larch, state, now - a.measure, now)
        load.wait()
        server.terminate()
        server.wait()
        for name, arc, l2 in sizes[1:]:
            server, state, sock = serve(larch, d, arc, l2, a.latency_ms)
            start = int(time.time())
            fio(sock, a.seconds).wait()
            end = int(time.time())
            time.sleep(2)
            measured[name] = measure(larch, state, end - a.measure, end)
            server.terminate()
            server.wait()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    lines = ["| size | ARC | L2ARC | ARC hits predicted | measured | L2 hits predicted | measured | "
             "all hits predicted | measured | read IOPS predicted | measured | IOPS predicted/measured |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, arc, l2 in sizes:
        p, m = predicted[name], measured[name]
        pi = p.get("read_iops") or 0.0
        lines.append("| %s | %s | %s | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.0f | %.0f | %.2f |" % (
            name, arc, l2 or "-", 100 * p["arc_hit_ratio"], 100 * m["arc"], 100 * p["l2_hit_ratio"], 100 * m["l2"],
            100 * (p["arc_hit_ratio"] + p["l2_hit_ratio"]), 100 * (m["arc"] + m["l2"]), pi, m["iops"],
            pi / m["iops"] if m["iops"] else 0.0))
    c = advice_s0["curves"]
    text = ("Predicted at S0 after %d s (sampled %d accesses, rate %.3f%%, %.0f KiB held); device model `%s`.\n"
            "Measured: S0 over the %d s before the prediction, S1 and S2 over the last %d s of %d s from cold.\n\n"
            % (a.warm, c["sampled"], 100 * c["rate"], c["memory_bytes"] / 1024, a.device, a.measure, a.measure,
               a.seconds) + "\n".join(lines) + "\n\nAdvice at S0:\n\n" +
            "\n".join("- " + l for l in advice_s0["lines"]) + "\n")
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
