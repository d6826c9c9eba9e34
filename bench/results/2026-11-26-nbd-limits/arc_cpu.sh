#!/usr/bin/env bash
set -euo pipefail
L=${L:-/work/main/target/release/larch}
J=${JOBS:-4}; S=${SECS:-6}
w=$(mktemp -d /var/tmp/larch-arc.XXXXXX)
trap 'pkill -TERM -f "serve --state-dir $w" || true; pkill -f "nbdkit -f -U $w" || true; sleep 1; rm -rf "$w"' EXIT
head -c 64M /dev/urandom > $w/data.img
"$L" pool create p --state-dir "$w/p" --arc-max 128M >/dev/null
"$L" volume add vol --backing "$w/data.img" --volblocksize 8K --state-dir "$w/p" >/dev/null
"$L" serve --state-dir "$w/p" --socket "$w/l.sock" --http off 2>>"$w/serve.log" & lp=$!
nbdkit -f -U $w/n.sock memory size=64M allocator=malloc & np=$!
sleep 1.5
nbdcopy $w/data.img "nbd+unix:///?socket=$w/n.sock"
fio --name=warm --ioengine=nbd --uri="nbd+unix:///vol?socket=$w/l.sock" --rw=read --bs=128k --iodepth=8 --loops=2 --size=64M --output-format=json >/dev/null
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
run() { fio --name=r --ioengine=nbd --uri="$1" --rw=randread --bs=8k --iodepth=1 --numjobs=$J --randrepeat=0 --norandommap --size=64M --time_based --runtime=$S --group_reporting --output-format=json | python3 -c "
import json,sys;t=sys.stdin.read();j=json.loads(t[t.index('{'):])['jobs'][0]['read'];print('%.0f' % (j['iops']*$S))"; }
for i in 1 2; do
 for sys in larch nbdkit; do
  if [ $sys = larch ]; then u="nbd+unix:///vol?socket=$w/l.sock"; p=$lp; else u="nbd+unix:///?socket=$w/n.sock"; p=$np; fi
  c0=$(cpu $p); n=$(run "$u"); c1=$(cpu $p)
  python3 -c "print('$sys jobs=$J: %.0f IOPS, %.1f us CPU per read' % ($n/$S, ($c1-$c0)*10000.0/$n))"
 done
done
if [ -n "${PERF:-}" ]; then
  fio --name=r --ioengine=nbd --uri="nbd+unix:///vol?socket=$w/l.sock" --rw=randread --bs=8k --iodepth=1 --numjobs=$J --randrepeat=0 --norandommap --size=64M --time_based --runtime=8 --output-format=json >/dev/null &
  sleep 1; perf record -q -F 1999 -g -p $lp -o /tmp/wp/arc.data -- sleep 5 2>/dev/null; wait %3 2>/dev/null || true
  perf report -i /tmp/wp/arc.data --no-children --stdio --percent-limit 1.2 --sort dso,symbol -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | cut -c1-120 | head -40
fi
