#!/usr/bin/env bash
# zilrss.sh BINARY : peak RSS of larch while fio rewrites a 64 MiB hot region (16K blocks,
# async, no FLUSH) on a pool with a log device, 20 s
set -euo pipefail
larch=$1
work=$(mktemp -d /var/tmp/larch-zilrss.XXXXXX)
$larch pool create p --state-dir $work/pool --arc-max 1G >/dev/null
$larch volume add vol --backing $work/vol.img --size 1G --volblocksize 16K --state-dir $work/pool >/dev/null
$larch log add $work/log.img --size 1G --state-dir $work/pool >/dev/null
$larch serve --state-dir $work/pool --socket $work/s.sock --http off 2>>$work/serve.log &
pid=$!
for _ in $(seq 100); do [ -S $work/s.sock ] && break; sleep 0.1; done
peak=0
( while kill -0 $pid 2>/dev/null; do r=$(awk '/VmRSS/{print $2}' /proc/$pid/status 2>/dev/null || echo 0); echo $r; sleep 0.25; done ) > $work/rss.txt &
spid=$!
bw=$(fio --name=w --ioengine=nbd --uri="nbd+unix:///vol?socket=$work/s.sock" --rw=randwrite --bs=16k --iodepth=8 --size=64M --time_based --runtime=20 --output-format=json | python3 -c 'import json,sys; t=sys.stdin.read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["write"]["bw_bytes"]/1e6))')
pending=$(python3 -c "import json; print(json.load(open('$work/pool/status.json'))['arcstats'].get('zil_itx_pending','-'))" 2>/dev/null || echo -)
kill $pid; wait $pid 2>/dev/null || true; kill $spid 2>/dev/null || true
peak=$(sort -n $work/rss.txt | tail -1)
echo "$(basename $larch): fio ${bw} MB/s, larch peak RSS $((peak/1024)) MiB, zil_itx_pending at the end: $pending"
rm -rf $work
