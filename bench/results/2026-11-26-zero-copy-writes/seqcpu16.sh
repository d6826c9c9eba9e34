#!/bin/bash
# A/B: seq 1M QD8 async writes into a 4G volume of 128K blocks (VBS to change); larch CPU per GB.
run() { # binary label
L=$1
W=$(mktemp -d /var/tmp/larch-seqcpu.XXXX)
$L pool create p --state-dir $W/pool --arc-max 1G >/dev/null
$L volume add vol0 --backing $W/vol.img --size 4G --volblocksize ${VBS:-128K} --state-dir $W/pool >/dev/null
$L serve --state-dir $W/pool --socket $W/nbd.sock --http off 2>$W/serve.log &
P=$!
for i in $(seq 50); do [ -S $W/nbd.sock ] && break; sleep 0.1; done
T0=$(awk '{print $14+$15}' /proc/$P/stat)
fio --name=w --ioengine=nbd --uri="nbd+unix:///vol0?socket=$W/nbd.sock" --size=4G --time_based --runtime=${RT:-10} --output-format=json --rw=write --bs=${BS:-1M} --iodepth=8 > $W/fio.json
T1=$(awk '{print $14+$15}' /proc/$P/stat)
python3 -c "
import json
t=open('$W/fio.json').read(); w=json.loads(t[t.index('{'):])['jobs'][0]['write']
gb=w['io_bytes']/1e9; cpu=($T1-$T0)/100
print('$2 MB/s %.0f  larch CPU %.2f s for %.1f GB = %.2f s/GB'%(w['bw_bytes']/1e6, cpu, gb, cpu/gb))"
kill $P; wait $P 2>/dev/null
rm -rf $W
}
for i in $(seq ${N:-3}); do run /tmp/wp/larch-base base; run /tmp/wp/larch-a16 a16; done
