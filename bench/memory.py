#!/usr/bin/python3
"""Resident memory of `larch serve` against zfs_arc_max, under request patterns that
could pin memory the ARC does not count (issue 14, defect 1).

  bench/memory.py [--larch PATH] [--pattern write-then-mfu|stream|all] [--scale N]
                  [--volblocksize 16K]

Each pattern runs a fresh pool with --arc-max 64M and a 16K-block volume (--volblocksize
to change; blocks of 64K and more are kept in page-aligned buffers) over a Unix
socket, through libnbd's Python binding (python3-libnbd), and prints the daemon's
VmRSS and VmHWM next to what `larch status` says the ARC holds:

- write-then-mfu (the issue's reproduction): 64 writes of 32 MiB, each followed, while
  it is still cached, by two reads of its first 16K block 70 ms apart (so the block
  goes to MFU); then 1 GiB of reads elsewhere. Each write is followed by a FLUSH, so
  its blocks are clean (in MRU) when the reads come whatever the disk's speed;
  without it, whether the second read finds the block in MRU depends on how fast
  the TXG synced.
- stream: a 2 GiB sequential write in 1 MiB requests, then 2 GiB of sequential 1 MiB
  reads (the prefetcher runs) and 20 s of random 16K reads over it.

VmRSS is read 12 s after the workload, once the daemon had its chance to give freed
memory back (it does when resident memory passes what the cache accounts for by more than
1/8 plus 64 MiB, at most every 10 s); VmHWM is the peak during the workload.

--scale divides the sizes (for a quick run). Nothing is asserted: this measures.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import nbd

MIB = 1 << 20


def rss_kib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return fields


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Pool:
    def __init__(self, larch, work, volume_bytes, volblocksize):
        self.larch = larch
        self.state = os.path.join(work, "pool")
        self.sock = os.path.join(work, "nbd.sock")
        run([larch, "pool", "create", "mem", "--state-dir", self.state, "--arc-max", "64M"])
        run([larch, "volume", "add", "vol0", "--backing", os.path.join(work, "vol.img"),
             "--size", str(volume_bytes), "--volblocksize", volblocksize, "--state-dir", self.state])
        self.proc = subprocess.Popen(
            [larch, "serve", "--state-dir", self.state, "--socket", self.sock, "--http", "off"],
            stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(self.sock):
                break
            time.sleep(0.1)
        self.h = nbd.NBD()
        self.h.connect_uri(f"nbd+unix:///vol0?socket={self.sock}")

    def arc_size(self):
        time.sleep(12)  # the daemon gives freed memory back at most every 10 s
        with open(os.path.join(self.state, "status.json")) as f:
            a = json.load(f)["arcstats"]
        return a["size"], a.get("l2_hdr_size", 0), a.get("hdr_size", 0), a.get("memory_trims", "-")

    def close(self):
        self.h.shutdown()
        self.proc.terminate()
        self.proc.wait(timeout=60)


def write_then_mfu(pool, scale):
    big = 32 * MIB // scale
    chunk = os.urandom(big)
    for i in range(64):
        off = i * big
        pool.h.pwrite(chunk, off)
        pool.h.flush()
        pool.h.pread(16384, off)
        time.sleep(0.07)
        pool.h.pread(16384, off)
    base = 64 * big
    for i in range((1 << 30) // scale // MIB):
        pool.h.pread(MIB, base + i * MIB)


def stream(pool, scale):
    total = (2 << 30) // scale
    chunk = os.urandom(MIB)
    for off in range(0, total, MIB):
        pool.h.pwrite(chunk, off)
    pool.h.flush()
    for off in range(0, total, MIB):
        pool.h.pread(MIB, off)
    rng = random.Random(1)
    end = time.time() + 20 / scale
    while time.time() < end:
        pool.h.pread(16384, rng.randrange(total // 16384) * 16384)


PATTERNS = {
    "write-then-mfu": (write_then_mfu, lambda s: (3 << 30) // s),
    "stream": (stream, lambda s: (2 << 30) // s),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--larch", default=os.path.join(os.path.dirname(__file__), "..",
                                                   "target", "release", "larch"))
    ap.add_argument("--pattern", default="all", choices=["all", *PATTERNS])
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--volblocksize", default="16K")
    args = ap.parse_args()
    names = list(PATTERNS) if args.pattern == "all" else [args.pattern]
    print("| pattern | ARC size (status) | ARC headers | L2 index | VmRSS after | VmHWM (peak) | trims |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        body, volume = PATTERNS[name]
        work = tempfile.mkdtemp(prefix="larch-mem.")
        try:
            pool = Pool(os.path.abspath(args.larch), work, volume(args.scale), args.volblocksize)
            body(pool, args.scale)
            size, l2hdr, hdr, trims = pool.arc_size()
            mem = rss_kib(pool.proc.pid)
            print(f"| {name} | {size / MIB:.1f} MiB | {hdr / MIB:.1f} MiB | {l2hdr / MIB:.1f} MiB | "
                  f"{mem['VmRSS'] / 1024:.0f} MiB | {mem['VmHWM'] / 1024:.0f} MiB | {trims} |", flush=True)
            pool.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
