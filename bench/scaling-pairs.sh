#!/usr/bin/env bash
# ARC hits at 1-64 jobs x QD1, larch against `nbdkit memory`, measured in pairs: both
# servers run side by side and each point is measured on one and then at once on the other,
# in alternating order, ROUNDS times. bench/run measures all of one server's points, then all
# of the other's, minutes apart; on this shared 2-vCPU VM each server lands in one of two
# speeds for minutes at a time (BENCHMARKS.md, "a thread per connection"), so a point of
# that run can compare one server's slow spell with the other's fast one. The pairs here
# see the same spell. The workload is bench/run's `scaling` (full mode): a 64 MiB working
# set of 8K blocks in a 128 MiB ARC, read sequentially twice to warm it, then random 8K
# reads at QD1 from N jobs, one NBD connection each.
#
#   bench/scaling-pairs.sh [SECONDS] [ROUNDS]   (default 10 s per run, 3 rounds)
#   JOBS="1 2" bench/scaling-pairs.sh 5 4       (only these job counts)
#
# Needs fio with the nbd engine, nbdkit and a release build (cargo build --release --bin larch).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
larch=$PWD/target/release/larch
work=$(mktemp -d /tmp/larch-pairs.XXXXXX)
trap 'pkill -TERM -f "serve --state-dir $work" || true; [ -n "${npid:-}" ] && kill "$npid" 2>/dev/null; sleep 1; rm -rf "$work"' EXIT
region=$((64 << 20))

head -c $region /dev/urandom > "$work/data.img"
"$larch" pool create bench --state-dir "$work/pool" --arc-max 128M >/dev/null
"$larch" volume add vol --backing "$work/data.img" --volblocksize 8K --read-latency-ms 8 \
    --write-latency-ms 5 --state-dir "$work/pool" >/dev/null
"$larch" serve --state-dir "$work/pool" --socket "$work/larch.sock" --http off 2>>"$work/serve.log" &
nbdkit --exit-with-parent -f -U "$work/nbdkit.sock" memory size=$region allocator=malloc 2>>"$work/serve.log" &
npid=$!
for _ in $(seq 100); do [ -S "$work/larch.sock" ] && [ -S "$work/nbdkit.sock" ] && break; sleep 0.1; done

larch_uri="nbd+unix:///vol?socket=$work/larch.sock"
nbdkit_uri="nbd+unix:///?socket=$work/nbdkit.sock"
for uri in "$larch_uri" "$nbdkit_uri"; do
    fio --name=prewarm --ioengine=nbd --uri="$uri" --rw=read --bs=128k --iodepth=8 --loops=2 \
        --size=$region --output-format=json >/dev/null
done

iops() { # uri jobs
    fio --name=scaling --ioengine=nbd --uri="$1" --rw=randread --bs=8k --iodepth=1 --randrepeat=0 \
        --norandommap --numjobs="$2" --size=$region --time_based --runtime="$secs" \
        --group_reporting --output-format=json |
        python3 -c 'import json,sys; t=sys.stdin.read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"]))'
}

echo "date $(date -u +'%F %H:%M') UTC, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD), $secs s per run"
echo
echo "| jobs | round | first | larch IOPS | nbdkit memory IOPS | larch / nbdkit |"
echo "|---:|---:|---|---:|---:|---:|"
pairs=0; ahead=0
for jobs in ${JOBS:-1 2 4 8 16 32 64}; do
    for round in $(seq "$rounds"); do
        if (( (round + jobs) % 2 )); then
            first=larch; l=$(iops "$larch_uri" "$jobs"); n=$(iops "$nbdkit_uri" "$jobs")
        else
            first=nbdkit; n=$(iops "$nbdkit_uri" "$jobs"); l=$(iops "$larch_uri" "$jobs")
        fi
        ratio=$(python3 -c "print(f'{$l/max($n,1):.2f}')")
        pairs=$((pairs + 1))
        if (( l >= n )); then ahead=$((ahead + 1)); fi
        echo "| $jobs | $round | $first | $l | $n | $ratio |"
    done
done
echo
echo "larch at or above nbdkit memory in $ahead of $pairs pairs"
