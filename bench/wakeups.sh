#!/usr/bin/env bash
# ARC hits at 16 jobs x QD1, larch against `nbdkit memory` (bench/run's `scaling` shape),
# with the machine's context switches and interrupts per read taken from /proc/stat
# while fio runs: unlike perf (whose counters, even software ones, put nbdkit in its slow
# mode; BENCHMARKS.md), reading /proc/stat does not disturb the servers. On a VM most
# interrupts here are the IPIs that wake an idle vCPU for a woken thread.
#
#   bench/wakeups.sh        (two rounds, 8 s per run, counts over 4 s in the middle)
#
# Needs fio with the nbd engine, nbdkit and a release build (cargo build --release --bin larch).
set -uo pipefail
cd "$(dirname "$0")/.."
larch=$PWD/target/release/larch
work=$(mktemp -d /tmp/larch-wake.XXXXXX)
trap 'pkill -TERM -f "serve --state-dir $work" || true; [ -n "${npid:-}" ] && kill "$npid" 2>/dev/null; sleep 1; rm -rf "$work"' EXIT
region=$((64 << 20))
head -c $region /dev/urandom > "$work/data.img"
"$larch" pool create bench --state-dir "$work/pool" --arc-max 128M >/dev/null
"$larch" volume add vol --backing "$work/data.img" --volblocksize 8K --state-dir "$work/pool" >/dev/null
"$larch" serve --state-dir "$work/pool" --socket "$work/larch.sock" --http off 2>>"$work/serve.log" &
nbdkit --exit-with-parent -f -U "$work/nbdkit.sock" memory size=$region allocator=malloc 2>>"$work/serve.log" &
npid=$!
for _ in $(seq 100); do [ -S "$work/larch.sock" ] && [ -S "$work/nbdkit.sock" ] && break; sleep 0.1; done
L="nbd+unix:///vol?socket=$work/larch.sock"; N="nbd+unix:///?socket=$work/nbdkit.sock"
for uri in "$L" "$N"; do fio --name=prewarm --ioengine=nbd --uri="$uri" --rw=read --bs=128k --iodepth=8 --loops=2 --size=$region --output-format=json >/dev/null; done
for round in 1 2; do for which in larch nbdkit; do
  uri=$L; [ $which = nbdkit ] && uri=$N
  fio --name=s --ioengine=nbd --uri="$uri" --rw=randread --bs=8k --iodepth=1 --randrepeat=0 --norandommap --numjobs=16 --size=$region --time_based --runtime=8 --group_reporting --output-format=json > $work/fio.json &
  fpid=$!
  sleep 2
  c0=$(awk '/^ctxt/{print $2}' /proc/stat); i0=$(awk '/^intr/{print $2}' /proc/stat); sleep 4; c1=$(awk '/^ctxt/{print $2}' /proc/stat); i1=$(awk '/^intr/{print $2}' /proc/stat)
  echo "$((c1-c0)),,context-switches(/proc/stat)" > $work/counts.txt; echo "$((i1-i0)),,interrupts(/proc/stat)" >> $work/counts.txt
  wait $fpid
  iops=$(python3 -c 'import json,sys; t=open(sys.argv[1]).read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"]))' $work/fio.json)
  echo "== $which round $round: $iops IOPS (fio 8 s); over 4 s (per read = count / (IOPS x 4)):"
  python3 - "$iops" $work/counts.txt <<'PY'
import sys
iops=float(sys.argv[1]); reads=iops*4
for line in open(sys.argv[2]):
    f=line.strip().split(',')
    if len(f)>2 and f[0].replace('.','').isdigit():
        print("   %-45s %12s  %.2f per read" % (f[2], f[0], float(f[0])/reads))
PY
done; done
