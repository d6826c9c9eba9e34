#!/bin/bash
# The Analytics page's screenshots in docs/ (README, docs/analytics.md): seed 000 in
# miniature, cold to warm, then the L2ARC switch off and on.
#
#   bench/analytics_screenshots.sh [OUT-DIR]      (default docs/img; about 17 minutes)
#
# A pool with a 128 MiB ARC, a 2 GiB cache device and a 4 GiB volume of 8K blocks whose
# backing file answers reads 8 ms late (larch's latency model: a 7,200 rpm disk's random
# read); fio reads 1.5 GiB of it at random with 8 jobs x 2 outstanding (seed 000: 10
# clients x 2 threads). Needs target/release/larch, fio, Chromium and the browser test's
# playwright-core (scripts/test installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/img}
larch=${LARCH:-target/release/larch}
warm_s=${WARM_SECONDS:-600}
off_s=${OFF_SECONDS:-150}
dir=$(mktemp -d)
cleanup() {
    [ -n "${fio_pid:-}" ] && kill "$fio_pid" 2>/dev/null
    [ -n "${larch_pid:-}" ] && kill -INT "$larch_pid" 2>/dev/null && wait "$larch_pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$out"
state=$dir/pool
"$larch" pool create seed000 --state-dir "$state" --arc-max 128M >/dev/null
"$larch" volume add vol0 --backing "$dir/vol0.img" --size 4G --volblocksize 8K \
    --read-latency-ms 8 --state-dir "$state" >/dev/null
"$larch" cache add "$dir/cache0.img" --size 2G --state-dir "$state" >/dev/null
"$larch" serve --state-dir "$state" --socket "$dir/nbd.sock" --http 127.0.0.1:0 2>"$dir/serve.log" &
larch_pid=$!
for _ in $(seq 100); do [ -S "$dir/nbd.sock" ] && [ -f "$state/daemon.json" ] && break; sleep 0.2; done
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$state/daemon.json" "$1"; }
http=$(field http)
token=$(field token)
url="http://$http/"
flip() {
    curl -sf -X POST -H "X-Larch-Token: $token" -d "{\"name\":\"l2arc_enabled\",\"value\":\"$1\"}" \
        "${url}api/v1/tunables" >/dev/null
}
shot() { # NAME [ARGS...]
    local name=$1
    shift
    node bench/analytics_screenshots.mjs "$url" "$out/$name.png" "$@"
    echo "$(date +%T) $out/$name.png"
}
fio --name=seed000 --ioengine=nbd --uri="nbd+unix:///vol0?socket=$dir/nbd.sock" --rw=randread \
    --bs=8k --size=1536M --numjobs=8 --iodepth=2 --time_based --runtime=$((warm_s + 2 * off_s + 120)) \
    --norandommap >/dev/null 2>&1 &
fio_pid=$!
echo "$(date +%T) cold start; warming for ${warm_s}s"
sleep "$warm_s"
shot analytics-warmup --span 900
shot analytics-warmup-l2 --span 900 --scroll "L2ARC warm-up"
flip 0
echo "$(date +%T) L2ARC off for ${off_s}s"
sleep "$off_s"
flip 1
echo "$(date +%T) L2ARC on again"
sleep "$off_s"
shot analytics-switch --span 900
shot analytics-switch-heat --span 900 --scroll "Latency at the front end" --zoom 10000
shot analytics-dram-stripe --span 300 --scroll "Latency at the front end" --zoom 1000 --sources arc,l2
shot analytics-devices --span 900 --scroll "Devices"
