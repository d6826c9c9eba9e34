#!/usr/bin/env bash
# The write path's figures, through fio's nbd engine against `larch serve`:
#  1. seed 004: sync writes (fio fsync=1: an NBD FLUSH after every write) with and without
#     a log device, the backing store slowed to a disk's figures (injected 5 ms per write);
#  2. async write throughput against fio on the same backing file directly (O_DIRECT),
#     qemu-nbd writing that file with O_DIRECT (the NBD path's own limit) and the engine
#     alone (examples/write_path: the syncer with no socket in the way), nbdkit's null
#     plugin (a server that stores nothing: the NBD path's ceiling on this machine), and
#     the TXG sync time; the backing file is written in full first, larch and fio take
#     turns at going first, and the whole is repeated ROUNDS times (default 2);
#  3. "do no harm": 4K random write IOPS with a cache device vs without.
#
#   bench/write-path.sh [SECONDS] [SECTIONS]   (default 20 s per run, sections 123)
#
# Needs fio with the nbd engine, qemu-nbd, and a release build (cargo build --release
# --bin larch; cargo build --release -p larch-engine --example write_path).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
larch=$PWD/target/release/larch
work=$(mktemp -d /tmp/larch-write.XXXXXX)
trap 'pkill -TERM -f "serve --state-dir $work" || true; sleep 1; rm -rf "$work"' EXIT

pool() { # name, write_latency_ms, with_log(0/1), with_cache(0/1), volblocksize
    local d=$work/$1
    "$larch" pool create "$1" --state-dir "$d" --arc-max 1G >/dev/null
    "$larch" volume add vol0 --backing "$d/vol.img" --size 4G --volblocksize "$5" \
        --write-latency-ms "$2" --state-dir "$d" >/dev/null
    if [ "$3" = 1 ]; then "$larch" log add "$d/log.img" --size 1G --state-dir "$d" >/dev/null; fi
    if [ "$4" = 1 ]; then "$larch" cache add "$d/cache.img" --size 4G --state-dir "$d" >/dev/null; fi
}
start() { "$larch" serve --state-dir "$work/$1" --socket "$work/$1.sock" --http off 2>>"$work/serve.log" & sleep 1.5; }
stop() { pkill -TERM -f "serve --state-dir $work/$1" || true; sleep 2; }

report() { # label, fio json, state dir
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
label, fio, state = sys.argv[1:]
text = open(fio).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
w = job["write"]
sync = job.get("sync", {}).get("lat_ns", {}).get("percentile", {})
clat = w["clat_ns"].get("percentile", {})
def ms(p, k): return f"{p[k]/1e6:.2f}" if k in p else "-"
try:
    a = json.load(open(state + "/status.json"))["arcstats"]
    txg = f"{a['txg_syncs']} syncs, {a['txg_sync_us']/max(a['txg_syncs'],1)/1000:.1f} ms avg"
except Exception:
    txg = "-"
print(f"| {label} | {w['bw_bytes']/1e6:.1f} | {w['iops']:.0f} | {ms(clat,'50.000000')} | {ms(clat,'99.000000')} | "
      f"{ms(sync,'50.000000')} | {ms(sync,'99.000000')} | {txg} |")
PY
}

fio_nbd() { # pool, label, fio args...
    local p=$1 label=$2; shift 2
    fio --name=w --ioengine=nbd --uri="nbd+unix:///vol0?socket=$work/$p.sock" --size=4G \
        --time_based --runtime="$secs" --group_reporting --output-format=json "$@" > "$work/fio.json"
    report "$label" "$work/fio.json" "$work/$p"
}

echo "date $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD)"
echo
if [[ ${2:-123} == *1* ]]; then
echo "### 1. Sync writes (fsync=1), backing store writes slowed by 5 ms"
echo "| run | MB/s | IOPS | write p50 ms | write p99 ms | flush p50 ms | flush p99 ms | TXGs |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
pool hdd 5 0 0 128K; pool hddlog 5 1 0 128K
for p in hdd hddlog; do
    start $p
    what=$([ $p = hdd ] && echo "no log device" || echo "log device")
    fio_nbd $p "seq 128K, QD1, $what" --rw=write --bs=128k --iodepth=1 --fsync=1
    fio_nbd $p "rand 4K, 4 jobs, $what" --rw=randwrite --bs=4k --iodepth=1 --numjobs=4 --fsync=1
    stop $p
done
echo
fi
if [[ ${2:-123} == *2* ]]; then
echo "### 2. Async writes vs the backing file (no injected latency)"
echo "| run | MB/s | IOPS | write p50 ms | write p99 ms | flush p50 ms | flush p99 ms | TXGs |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
larch_run() {
    start fast
    fio_nbd fast "larch, seq 1M, QD8, async" --rw=write --bs=1M --iodepth=8
    stop fast
}
fio_run() {
    fio --name=raw --filename="$work/fast/vol.img" --direct=1 --ioengine=libaio --rw=write --bs=1M \
        --iodepth=8 --size=4G --time_based --runtime="$secs" --output-format=json > "$work/fio.json"
    report "fio on the backing file, O_DIRECT, seq 1M, QD8" "$work/fio.json" /nonexistent
}
for round in $(seq "${ROUNDS:-2}"); do
    rm -rf "$work/fast"; pool fast 0 0 0 128K
    # Written once before either is measured: both then overwrite blocks the file system
    # has allocated (a first write into a sparse file costs extent allocation, and
    # larch's fdatasync per TXG then commits it), and larch and fio take turns at going
    # first (the virtual disk is fastest after a pause).
    fio --name=fill --filename="$work/fast/vol.img" --direct=1 --ioengine=libaio --rw=write \
        --bs=1M --iodepth=8 --size=4G --output-format=json > /dev/null
    if (( round % 2 )); then larch_run; fio_run; else fio_run; larch_run; fi
    qemu-nbd --format=raw --cache=none --aio=io_uring --shared=8 --persistent \
        --socket="$work/qemu.sock" "$work/fast/vol.img" 2>>"$work/serve.log" &
    qpid=$!
    for _ in $(seq 50); do [ -S "$work/qemu.sock" ] && break; sleep 0.1; done
    fio --name=w --ioengine=nbd --uri="nbd+unix:///?socket=$work/qemu.sock" --size=4G \
        --time_based --runtime="$secs" --output-format=json --rw=write --bs=1M --iodepth=8 > "$work/fio.json"
    kill "$qpid"; wait "$qpid" 2>/dev/null || true
    report "qemu-nbd on the backing file (O_DIRECT, io_uring), seq 1M, QD8" "$work/fio.json" /nonexistent
    # The NBD path's own ceiling on this machine: a server that stores nothing.
    nbdkit --exit-with-parent -f -U "$work/null.sock" null 4G 2>>"$work/serve.log" &
    npid=$!
    for _ in $(seq 50); do [ -S "$work/null.sock" ] && break; sleep 0.1; done
    fio --name=w --ioengine=nbd --uri="nbd+unix:///?socket=$work/null.sock" --size=4G \
        --time_based --runtime="$secs" --output-format=json --rw=write --bs=1M --iodepth=8 > "$work/fio.json"
    kill "$npid"; wait "$npid" 2>/dev/null || true
    rm -f "$work/null.sock"
    report "nbdkit null (stores nothing: the NBD path alone), seq 1M, QD8" "$work/fio.json" /nonexistent
    engine=$PWD/target/release/examples/write_path
    if [ -x "$engine" ]; then
        echo "| engine alone (examples/write_path, 2 writer threads, 128K blocks): $("$engine" "$work/engine.img" "$secs" 128 2 | sed -n 1p) |"
    fi
done
echo
fi
if [[ ${2:-123} == *3* ]]; then
echo "### 3. 4K random writes, cache device vs none (do no harm)"
echo "| run | MB/s | IOPS | write p50 ms | write p99 ms | flush p50 ms | flush p99 ms | TXGs |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
pool nol2 0 0 0 8K; pool l2 0 0 1 8K
for p in nol2 l2 nol2 l2; do
    start $p
    fio_nbd $p "$([ $p = l2 ] && echo 'cache device' || echo 'no cache device'), rand 4K, QD16" \
        --rw=randwrite --bs=4k --iodepth=16 --size=1G
    stop $p
done
fi
