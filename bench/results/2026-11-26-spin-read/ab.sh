#!/usr/bin/env bash
# A/B of two larch binaries side by side: ARC hits, 8K random reads at QD1.
set -euo pipefail
A=$1; B=$2; secs=${3:-5}; rounds=${4:-4}; jobsl=${JOBS:-1 16}
work=$(mktemp -d /tmp/larch-ab.XXXXXX)
trap 'pkill -TERM -f "serve --state-dir $work" || true; sleep 1; rm -rf "$work"' EXIT
region=$((64 << 20))
head -c $region /dev/urandom > "$work/dataA.img"; cp "$work/dataA.img" "$work/dataB.img"
for x in A B; do
  bin=${!x}
  "$bin" pool create bench$x --state-dir "$work/pool$x" --arc-max 128M >/dev/null
  "$bin" volume add vol --backing "$work/data$x.img" --volblocksize 8K --read-latency-ms 8 --write-latency-ms 5 --state-dir "$work/pool$x" >/dev/null
  "$bin" serve --state-dir "$work/pool$x" --socket "$work/$x.sock" --http off 2>>"$work/serve.log" &
done
for _ in $(seq 300); do [ -S "$work/A.sock" ] && [ -S "$work/B.sock" ] && break; sleep 0.1; done; ls $work; cat $work/serve.log
for x in A B; do
  fio --name=prewarm --ioengine=nbd --uri="nbd+unix:///vol?socket=$work/$x.sock" --rw=read --bs=128k --iodepth=8 --loops=2 --size=$region --output-format=json >/dev/null
done
iops() { fio --name=s --ioengine=nbd --uri="nbd+unix:///vol?socket=$work/$1.sock" --rw=randread --bs=8k --iodepth=1 --randrepeat=0 --norandommap --numjobs="$2" --size=$region --time_based --runtime="$secs" --group_reporting --output-format=json | python3 -c 'import json,sys; t=sys.stdin.read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"]))'; }
echo "| jobs | round | first | A IOPS | B IOPS | B / A |"
for jobs in $jobsl; do for r in $(seq $rounds); do
  if (( r % 2 )); then f=A; a=$(iops A $jobs); b=$(iops B $jobs); else f=B; b=$(iops B $jobs); a=$(iops A $jobs); fi
  echo "| $jobs | $r | $f | $a | $b | $(python3 -c "print(f'{$b/max($a,1):.2f}')") |"
done; done
