#!/bin/bash
# The sampled access log's cost on ARC hits (issue 17): one `larch serve` whose volume's
# working set fits its ARC, fio random reads through NBD, mrc_sample switched on and off
# (`larch set`, applied at once) between alternating 8-second rounds in the same run.
# IOPS on a shared 2-core machine vary by a few percent from round to round, so the daemon's
# CPU time per read (utime + stime from /proc, over the round) is reported beside them.
# Usage: bench/mrc_cost.sh [ROUNDS] [SIZE] [BS]   (after `cargo build --release`; needs fio
# with its nbd engine). Prints "on|off JOBSxQD IOPS CPU-µs/read" per round, then the means.
set -u
larch=${LARCH:-target/release/larch}
rounds=${1:-3}
size=${2:-32M}
bs=${3:-4k}
dir=$(mktemp -d)
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
uri="nbd+unix:///vol0?socket=$dir/nbd.sock"
"$larch" serve --state-dir "$dir/pool" --socket "$dir/nbd.sock" --http 127.0.0.1:0 \
    --demo-volume-size 64M --demo-cache-size 64M --demo-arc-max 128M 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do [ -S "$dir/nbd.sock" ] && [ -f "$dir/pool/daemon.json" ] && break; sleep 0.2; done
fio --name=w --ioengine=nbd --uri="$uri" --rw=randread --bs="$bs" --size="$size" \
    --iodepth=8 --time_based --runtime=5 >/dev/null 2>&1
out="$dir/out"
for _ in $(seq "$rounds"); do
    for mode in on off; do
        if [ $mode = on ]; then v=1; else v=0; fi
        "$larch" set --state-dir "$dir/pool" mrc_sample=$v >/dev/null
        for point in "4 8" "1 1"; do
            set -- $point
            cpu0=$(awk '{print $14 + $15}' /proc/$pid/stat)
            fio --name=w --ioengine=nbd --uri="$uri" --rw=randread --bs="$bs" --size="$size" \
                --numjobs="$1" --iodepth="$2" --group_reporting --time_based --runtime=8 \
                --output-format=json --output="$dir/fio.json" >/dev/null 2>&1
            cpu1=$(awk '{print $14 + $15}' /proc/$pid/stat)
            echo "$mode ${1}x${2} $(python3 -c "
import json, os, sys
r = json.load(open(sys.argv[1]))['jobs'][0]['read']
ticks = (int(sys.argv[3]) - int(sys.argv[2])) / os.sysconf('SC_CLK_TCK')
print(int(r['iops']), '%.2f' % (ticks * 1e6 / r['total_ios']))" "$dir/fio.json" "$cpu0" "$cpu1")" | tee -a "$out"
        done
    done
done
"$larch" advise --state-dir "$dir/pool" | head -1
grep mrc_size <("$larch" arcstat --help >/dev/null 2>&1; curl -s "http://$(python3 -c "import json; print(json.load(open('$dir/pool/daemon.json'))['http'])")/arcstats") || true
python3 - "$out" <<'PY'
import sys, collections
v = collections.defaultdict(list)
c = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, point, iops, cpu = line.split()
    v[(mode, point)].append(int(iops))
    c[(mode, point)].append(float(cpu))
mean = lambda x: sum(x) / len(x)
for point in ("4x8", "1x1"):
    on, off = v[("on", point)], v[("off", point)]
    con, coff = c[("on", point)], c[("off", point)]
    print(f"{point}: IOPS on {mean(on):,.0f} (min {min(on):,} max {max(on):,}), off {mean(off):,.0f} "
          f"(min {min(off):,} max {max(off):,}): on/off {mean(on) / mean(off):.3f}; "
          f"daemon CPU per read on {mean(con):.2f} us, off {mean(coff):.2f} us: on/off {mean(con) / mean(coff):.3f}")
PY
