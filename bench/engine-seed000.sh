#!/usr/bin/env bash
# The seed-000 shape on this machine, small: a 1 GiB volume whose backing store answers
# every read after an injected 8 ms (a 7200 rpm disk's random read), a 64 MiB ARC, a 2 GiB
# cache device file, and fio 8K random reads from 20 jobs. Measures IOPS and latency with
# the L2ARC off, then cold -> warm with it on, then warm again after a restart.
#
#   bench/engine-seed000.sh [WINDOW_SECONDS] [WINDOWS]      (defaults: 20 s, 6 windows)
#
# Needs fio with the nbd engine and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-20}
windows=${2:-6}
larch=target/release/larch
work=$(mktemp -d /tmp/larch-seed000.XXXXXX)
trap 'pkill -TERM -f "serve --state-dir $work" || true; rm -rf "$work"' EXIT

make_pool() { # dir, with_cache(0/1)
    "$larch" serve --state-dir "$1" --socket "$1.sock" --demo-volume-size 1G \
        --demo-cache-size 2G --demo-arc-max 64M >/dev/null 2>&1 &
    local pid=$!
    sleep 1.5; kill -TERM $pid; wait $pid || true
    python3 - "$1" "$2" "$work/vol.img" <<'PY'
import json, sys
d, with_cache, vol = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
p = d + "/pool.json"; c = json.load(open(p))
c["volumes"][0].update(volblocksize=8192, backing=vol,
    latency={"read_min_us": 8000, "read_max_us": 8000, "write_min_us": 0, "write_max_us": 0})
if not with_cache:
    c["cache_devices"] = []
json.dump(c, open(p, "w"), indent=2)
PY
}

start() { "$larch" serve --state-dir "$1" --socket "$1.sock" 2>>"$work/serve.log" & sleep 2; }
stop() { pkill -TERM -f "serve --state-dir $1" || true; sleep 2; }

run_fio() { # dir, label
    fio --name=seed000 --ioengine=nbd --uri="nbd+unix:///vol0?socket=$1.sock" --rw=randread \
        --bs=8k --size=1G --numjobs=20 --iodepth=1 --time_based --runtime="$window" \
        --group_reporting --output-format=json > "$work/fio.json"
    python3 - "$2" "$work/fio.json" "$1/status.json" <<'PY'
import json, sys
label, fio, status = sys.argv[1:]
text = open(fio).read()
j = json.loads(text[text.index("{"):])["jobs"][0]["read"]
pct = j["clat_ns"]["percentile"]
a = json.load(open(status))["arcstats"]
l2h, l2m = a.get("l2_hits", 0), a.get("l2_misses", 0)
print(f"| {label} | {j['iops']:.0f} | {pct['50.000000']/1e6:.2f} | {pct['99.000000']/1e6:.2f} | "
      f"{a['size']/2**20:.0f} MiB | {a.get('l2_size', 0)/2**20:.0f} MiB | "
      f"{(100*l2h/(l2h+l2m)) if l2h+l2m else 0:.1f}% |")
PY
}

echo "writing 1 GiB of random data to the backing file..."
dd if=/dev/urandom of="$work/vol.img" bs=1M count=1024 status=none
make_pool "$work/off" 0
make_pool "$work/on" 1
echo "date $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD)"
echo "| run | IOPS | p50 ms | p99 ms | ARC size | L2 size | L2 hit % (cumulative) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
start "$work/off"
run_fio "$work/off" "L2ARC off"
stop "$work/off"
start "$work/on"
for i in $(seq 1 "$windows"); do
    run_fio "$work/on" "L2ARC on, window $i ($((i * window)) s)"
done
stop "$work/on"
start "$work/on"
sleep 3
run_fio "$work/on" "L2ARC on, after restart"
stop "$work/on"
grep -h "rebuild successful" "$work/on/history" || true
