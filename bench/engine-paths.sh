#!/usr/bin/env bash
# The two hit paths of `larch serve`, each against its yardstick in the same run:
#  1. ARC hits: a 256 MiB volume that fits in the ARC, fio 4K random reads at QD1 and QD32,
#     vs `nbdkit memory` holding the same bytes, same fio job, same Unix-socket transport.
#  2. L2 hits: a 512 MiB volume, a 16 MiB ARC and a 1 GiB cache device file, warmed until
#     the L2 holds the volume; fio 8K random reads at QD1 and QD32 through larch (cache
#     device reads through io_uring, then through the thread pool: l2arc_io_uring=0) vs fio
#     reading the cache device file directly (O_DIRECT, libaio, same block size and depth).
#
#   bench/engine-paths.sh [SECONDS]          (default 10 s per fio run)
#
# Needs fio, nbdkit, nbdcopy and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
larch=$PWD/target/release/larch
work=$(mktemp -d /tmp/larch-paths.XXXXXX)
cleanup() {
    pkill -TERM -f "serve --state-dir $work" || true
    pkill -f "nbdkit.*$work" || true
    sleep 1
    rm -rf "$work"
}
trap cleanup EXIT

fio_iops() { # uri-or-file, bs, qd, extra...
    local target=$1 bs=$2 qd=$3; shift 3
    fio --name=p --rw=randread --bs="$bs" --iodepth="$qd" --numjobs=1 --time_based \
        --runtime="$secs" --output-format=json "$target" "$@" > "$work/fio.json"
    python3 - "$work/fio.json" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
j = json.loads(t[t.index("{"):])["jobs"][0]["read"]
p = j["clat_ns"]["percentile"]
print(f"{j['iops']:.0f} {p['50.000000'] / 1000:.0f} {p['99.000000'] / 1000:.0f}")
PY
}

serve() { # state dir
    "$larch" serve --state-dir "$1" --socket "$1.sock" --http off 2>>"$work/serve.log" &
    sleep 2
}

echo "date $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD), ${secs}s per run"
echo
echo "## ARC hit path (256 MiB volume in a 1 GiB ARC; 4K random reads)"
dd if=/dev/urandom of="$work/small.img" bs=1M count=256 status=none
"$larch" pool create arc --state-dir "$work/arc" --arc-max 1G >/dev/null
"$larch" volume add v --backing "$work/small.img" --volblocksize 4K --state-dir "$work/arc" >/dev/null
serve "$work/arc"
uri="nbd+unix:///v?socket=$work/arc.sock"
nbdcopy "$uri" null: && nbdcopy "$uri" null:
nbdkit --unix "$work/mem.sock" --pidfile "$work/nbdkit.pid" memory 256M
sleep 1
nbdcopy "$work/small.img" "nbd+unix:///?socket=$work/mem.sock"
echo "| server | QD | IOPS | p50 µs | p99 µs | vs nbdkit memory |"
echo "|---|---:|---:|---:|---:|---:|"
for qd in 1 32; do
    read -r k50 kp50 kp99 < <(fio_iops --ioengine=nbd 4k "$qd" --uri="nbd+unix:///?socket=$work/mem.sock" --size=256M)
    read -r l50 lp50 lp99 < <(fio_iops --ioengine=nbd 4k "$qd" --uri="$uri" --size=256M)
    echo "| nbdkit memory | $qd | $k50 | $kp50 | $kp99 | 1.00 |"
    echo "| larch serve (ARC hits) | $qd | $l50 | $lp50 | $lp99 | $(python3 -c "print(f'{$l50/$k50:.2f}')") |"
done
kill "$(cat "$work/nbdkit.pid")" || true
pkill -TERM -f "serve --state-dir $work/arc" || true
sleep 1

echo
echo "## L2 hit path (512 MiB volume, 16 MiB ARC, 1 GiB cache file; 8K random reads)"
dd if=/dev/urandom of="$work/big.img" bs=1M count=512 status=none
"$larch" pool create l2 --state-dir "$work/l2" --arc-max 16M >/dev/null
"$larch" volume add v --backing "$work/big.img" --volblocksize 8K --state-dir "$work/l2" >/dev/null
"$larch" cache add "$work/cache.img" --size 1G --state-dir "$work/l2" >/dev/null
"$larch" set l2arc_write_max=64M --state-dir "$work/l2" >/dev/null
serve "$work/l2"
uri="nbd+unix:///v?socket=$work/l2.sock"
want=$((512 * 1024 / 8 * 95 / 100))
for i in $(seq 1 60); do
    fio --name=w --ioengine=nbd --uri="$uri" --rw=randread --bs=8k --size=512M --iodepth=16 \
        --time_based --runtime=3 >/dev/null
    have=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["arcstats"]["l2_blocks"])' "$work/l2/status.json")
    [ "$have" -ge "$want" ] && break
done
echo "warmed: $have of $((512 * 1024 / 8)) blocks on L2"
echo "| reader | QD | IOPS | p50 µs | p99 µs | vs raw device |"
echo "|---|---:|---:|---:|---:|---:|"
for qd in 1 32; do
    read -r r50 rp50 rp99 < <(fio_iops --ioengine=libaio 8k "$qd" --filename="$work/cache.img" --direct=1 --size=1G)
    echo "| fio on the cache file (O_DIRECT, libaio) | $qd | $r50 | $rp50 | $rp99 | 1.00 |"
    for path in io_uring threads; do
        "$larch" set l2arc_io_uring=$([ $path = io_uring ] && echo 1 || echo 0) --state-dir "$work/l2" >/dev/null
        sleep 2 # the daemon applies tunables.json within a second
        read -r l50 lp50 lp99 < <(fio_iops --ioengine=nbd 8k "$qd" --uri="$uri" --size=512M)
        echo "| larch serve (L2 hits, reads through $path) | $qd | $l50 | $lp50 | $lp99 | $(python3 -c "print(f'{$l50/$r50:.2f}')") |"
    done
done
python3 - "$work/l2/status.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["arcstats"]
print(f"l2_hits {a['l2_hits']} l2_misses {a['l2_misses']} hits {a['hits']} misses {a['misses']}")
PY
