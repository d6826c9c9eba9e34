#!/usr/bin/env bash
# CPU microseconds of larch per ARC hit, per L2 hit and per miss: 8K random reads of random
# data through NBD (fio), larch's utime+stime over each run divided by its reads. Manual:
# needs fio, ~2.5 GiB in /var/tmp and a release build (cargo build --release --bin larch).
# Usage: bench/cpu-per-op.sh
set -euo pipefail
L=${LARCH:-$(cd "$(dirname "$0")/.." && pwd)/target/release/larch}
w=$(mktemp -d /var/tmp/larch-cpu3.XXXXXX)
trap 'pkill -TERM -f "serve --state-dir $w" || true; sleep 1; rm -rf "$w"' EXIT
head -c 1G /dev/urandom > $w/data.img
head -c 1G /dev/urandom > $w/cache.img
"$L" pool create p --state-dir "$w/p" --arc-max 128M >/dev/null
"$L" volume add vol --backing "$w/data.img" --volblocksize 8K --state-dir "$w/p" >/dev/null
"$L" cache add $w/cache.img --size 1G --state-dir "$w/p" --force >/dev/null
U="nbd+unix:///vol?socket=$w/l.sock"
"$L" serve --state-dir "$w/p" --socket "$w/l.sock" --http off 2>>"$w/serve.log" & lp=$!
for i in $(seq 50); do [ -S $w/l.sock ] && break; sleep 0.1; done; sleep 0.5
cpu() { awk '{print $14+$15}' /proc/$lp/stat; }
run() { # name, fio args...
  local name=$1; shift
  c0=$(cpu); fio --name=r --ioengine=nbd --uri="$U" --rw=randread --bs=8k --randrepeat=0 --output-format=json --group_reporting "$@" > $w/f.json; c1=$(cpu)
  python3 - $w/f.json $c0 $c1 "$name" <<'PY'
import json,sys
t=open(sys.argv[1]).read(); j=json.loads(t[t.index('{'):])['jobs'][0]['read']; n=j['total_ios']
print("%-34s %8.0f IOPS  %5.1f us of larch CPU per read  (%d reads)" % (sys.argv[4], j['iops'], (int(sys.argv[3])-int(sys.argv[2]))*10000.0/n, n))
PY
}
# Misses: 512 MiB never read before, no L2 copies yet (the feed writes behind; the first pass misses).
run "miss, 4 x QD8 (first pass)" --numjobs=4 --iodepth=8 --offset_increment=128M --size=128M
# Fill the L2: a slow pass so the feed sees every block, then let it write.
fio --name=fill --ioengine=nbd --uri="$U" --rw=randread --bs=8k --numjobs=4 --iodepth=8 --rate_iops=2048 --offset_increment=128M --size=128M --output-format=json >/dev/null
sleep 3
run "L2 (+~20% ARC) hits, 4 x QD8" --numjobs=4 --iodepth=8 --offset_increment=128M --size=128M --time_based --runtime=8
run "L2 (+~20% ARC) hits, 1 x QD1" --numjobs=1 --iodepth=1 --size=512M --time_based --runtime=8
# ARC hits: 64 MiB read twice, then random reads over it.
fio --name=warm --ioengine=nbd --uri="$U" --rw=read --bs=128k --iodepth=8 --loops=2 --size=64M --output-format=json >/dev/null
run "ARC hits, 4 x QD8" --numjobs=4 --iodepth=8 --size=64M --time_based --runtime=8
run "ARC hits, 1 x QD1" --numjobs=1 --iodepth=1 --size=64M --time_based --runtime=8
"$L" status --state-dir "$w/p" 2>/dev/null | grep -i -E "hit|l2" | head -8
