#!/usr/bin/env bash
# CPU microseconds of larch per operation: larch's utime+stime (/proc/<pid>/stat) over a run
# divided by the run's operations, all through NBD with fio's nbd engine, 8K blocks.
# - Reads of random data: ARC hits, L2 hits and misses.
# - Sync writes (randwrite to a volume with --sync always, on a pool with a log device):
#   every write takes the path of an NBD write with FUA (Volume::write: a write is
#   acknowledged once durable when write_is_sync(fua), which is true for every write under
#   sync=always), i.e. it is logged to the log device before its reply. fio's nbd engine
#   never sets NBD_CMD_FLAG_FUA (engines/nbd.c passes flags 0 to nbd_aio_pwrite), and
#   --sync=1 is an open(2) flag it ignores; --fsync=1 makes it send NBD_CMD_FLUSH after each
#   write instead: the "write+FLUSH" row (a plain write, then a FLUSH that commits the intent
#   log: two requests per write, counted as one write).
# - Async writes (randwrite to a --sync standard volume, no FUA, no FLUSH), for comparison.
# Write runs are charged the CPU until larch is idle again after fio ends (their TXG syncs;
# the pool runs with zfs_txg_timeout=1 so the last TXG does not wait 5 s).
# Manual: needs fio, ~3.3 GiB in /var/tmp and release builds (cargo build --release --bin
# larch). One set of runs takes ~1m45s; the machine should be otherwise idle. Sync writes
# wait for the log device: their IOPS, and their CPU per write too, follow its latency, so
# they are the noisiest rows on a shared disk.
#
# Usage: bench/cpu-per-op.sh                       one binary: $LARCH, else target/release/larch
#        bench/cpu-per-op.sh BIN_A BIN_B... [ROUNDS]
#   runs the whole set for A, then B, ..., then again (ROUNDS rounds, default 2), and prints a
#   table of the median per binary with the ratio of each to A. RUNTIME=8: seconds per run.
#   CPUS=LIST: run larch serve and fio under `taskset -c LIST` (e.g. CPUS=1: server and
#   client on one CPU, so how often they share a CPU does not vary from run to run).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runtime=${RUNTIME:-8}
rounds=1
if [ $# -eq 0 ]; then
  bins=("${LARCH:-$here/target/release/larch}")
else
  bins=("$@"); rounds=2
  if [ $# -ge 2 ] && [[ ${bins[-1]} =~ ^[0-9]+$ ]] && [ ! -e "${bins[-1]}" ]; then
    rounds=${bins[-1]}; unset 'bins[-1]'
  fi
fi
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
[ ${#bins[@]} -le 8 ] || { echo "at most 8 binaries" >&2; exit 2; }
letters=(A B C D E F G H)
tick=$(getconf CLK_TCK)
pin=(); [ -z "${CPUS:-}" ] || pin=(taskset -c "$CPUS")

w=$(mktemp -d /var/tmp/larch-cpu3.XXXXXX)
lp=
alive() { [ -n "$lp" ] && [ -r /proc/$lp/stat ] && [ "$(awk '{print $3}' /proc/$lp/stat 2>/dev/null)" != Z ]; }
stop() { # the server started last: SIGTERM, then SIGKILL after 10 s
  [ -n "$lp" ] || return 0
  kill -TERM "$lp" 2>/dev/null || true
  for _ in $(seq 100); do alive || break; sleep 0.1; done
  kill -KILL "$lp" 2>/dev/null || true
  wait "$lp" 2>/dev/null || true
  lp=
}
trap 'stop; rm -rf "$w"' EXIT
trap 'exit 130' INT TERM HUP

# The files, written once (allocated, so no run pays for filling holes) and reused by every
# set: random data to read; zeros for the cache and log devices and the written volumes.
head -c 1G /dev/urandom > "$w/data.img"
for f in cache:1024 log:256 async:512 sync:512; do
  dd if=/dev/zero of="$w/${f%:*}.img" bs=1M count="${f#*:}" status=none
done

cpu() { awk '{print $14, $15}' /proc/$lp/stat; } # utime stime, in ticks
settle() { # until larch used at most one tick in each of two half-seconds (at most 20 s)
  local a b quiet=0
  a=$(cpu | awk '{print $1+$2}')
  for _ in $(seq 40); do
    sleep 0.5; b=$(cpu | awk '{print $1+$2}')
    if [ $((b - a)) -le 1 ]; then quiet=$((quiet + 1)); [ $quiet -ge 2 ] && break; else quiet=0; fi
    a=$b
  done
}
run() { # label, volume, fio args...
  local name=$1 vol=$2; shift 2
  local c0 c1
  c0=$(cpu)
  "${pin[@]}" fio --name=r --ioengine=nbd --uri="nbd+unix:///$vol?socket=$w/l.sock" --bs=8k --randrepeat=0 \
    --output-format=json --group_reporting "$@" > "$w/f.json"
  case " $* " in *write*) settle;; esac
  c1=$(cpu)
  python3 - "$w/f.json" "$c0" "$c1" "$tick" "$name" "$bi" "$round" "$w/results" <<'PY'
import json, sys
f, c0, c1, tick, name, b, r, results = sys.argv[1:]
t = open(f).read(); job = json.loads(t[t.index('{'):])['jobs'][0]
op = 'write' if job['write']['total_ios'] else 'read'
n = job[op]['total_ios']; flushes = job['sync']['total_ios']
(u0, s0), (u1, s1) = [map(int, c.split()) for c in (c0, c1)]
us = ((u1 - u0) + (s1 - s0)) * 1e6 / int(tick) / n; sys_us = (s1 - s0) * 1e6 / int(tick) / n
line = "%-34s %8.0f IOPS  %6.1f us of larch CPU per %s (%.1f sys)  (%d %ss%s)" % (
    name, job[op]['iops'], us, op, sys_us, n, op, ", %d flushes" % flushes if flushes else "")
print(line)
with open(results, 'a') as out:
    print("\t".join([b, r, name, "%.3f" % us, "%.1f" % job[op]['iops']]), file=out)
PY
}

one_set() { # binary
  local L=$1 p=$w/p U
  rm -rf "$p"
  "$L" pool create p --state-dir "$p" --arc-max 128M >/dev/null
  "$L" volume add vol --backing "$w/data.img" --volblocksize 8K --state-dir "$p" >/dev/null
  "$L" cache add "$w/cache.img" --size 1G --state-dir "$p" --force >/dev/null
  "$L" log add "$w/log.img" --state-dir "$p" --force >/dev/null
  "$L" volume add async --backing "$w/async.img" --volblocksize 8K --state-dir "$p" >/dev/null
  "$L" volume add sync --backing "$w/sync.img" --volblocksize 8K --sync always --state-dir "$p" >/dev/null
  "$L" set zfs_txg_timeout=1 --state-dir "$p" >/dev/null
  rm -f "$w/l.sock"
  "${pin[@]}" "$L" serve --state-dir "$p" --socket "$w/l.sock" --http off 2>>"$w/serve.log" & lp=$!
  for _ in $(seq 50); do [ -S "$w/l.sock" ] && break; sleep 0.1; done; sleep 0.5
  alive || { echo "larch serve did not start:" >&2; tail "$w/serve.log" >&2; exit 1; }
  U="nbd+unix:///vol?socket=$w/l.sock"
  # Idle: larch's CPU per second with no I/O (its timers, the 1 s TXG timeout), which every
  # run below also pays; it weighs most on the slow ones (sync writes at QD1).
  local i0 i1
  i0=$(cpu | awk '{print $1+$2}'); sleep 4; i1=$(cpu | awk '{print $1+$2}')
  python3 -c 'import sys; t, a, b = map(int, sys.argv[1:4]); u = (b - a) * 1e6 / t / 4
print("%-34s %8s       %6.1f us of larch CPU per second" % ("idle (per second, no I/O)", "", u))
open(sys.argv[4], "a").write("%s\t%s\tidle (per second, no I/O)\t%.3f\t0\n" % (sys.argv[5], sys.argv[6], u))' \
    "$tick" "$i0" "$i1" "$w/results" "$bi" "$round"
  local q1="--numjobs=1 --iodepth=1" q8="--numjobs=4 --iodepth=8 --offset_increment=128M --size=128M"
  local tb="--time_based --runtime=$runtime"
  # Misses: 512 MiB never read before, no L2 copies yet (the feed writes behind; the first
  # pass misses).
  run "miss, 4 x QD8 (first pass)" vol --rw=randread $q8
  # Fill the L2: a slow pass so the feed sees every block, then let it write.
  "${pin[@]}" fio --name=fill --ioengine=nbd --uri="$U" --rw=randread --bs=8k --numjobs=4 --iodepth=8 --rate_iops=2048 \
    --offset_increment=128M --size=128M --output-format=json >/dev/null
  sleep 3
  run "L2 (+~20% ARC) hits, 4 x QD8" vol --rw=randread $q8 $tb
  run "L2 (+~20% ARC) hits, 1 x QD1" vol --rw=randread $q1 --size=512M $tb
  # ARC hits: 64 MiB read twice, then random reads over it.
  "${pin[@]}" fio --name=warm --ioengine=nbd --uri="$U" --rw=read --bs=128k --iodepth=8 --loops=2 --size=64M \
    --output-format=json >/dev/null
  run "ARC hits, 4 x QD8" vol --rw=randread --numjobs=4 --iodepth=8 --size=64M $tb
  run "ARC hits, 1 x QD1" vol --rw=randread $q1 --size=64M $tb
  # Writes, each over a 512 MiB volume (8K volblocksize: whole blocks, no read-modify-write).
  run "sync (FUA path) write, 1 x QD1" sync --rw=randwrite $q1 --size=512M $tb
  run "sync (FUA path) write, 4 x QD8" sync --rw=randwrite $q8 $tb
  run "write+FLUSH, 1 x QD1" async --rw=randwrite $q1 --size=512M --fsync=1 $tb
  run "async write, 1 x QD1" async --rw=randwrite $q1 --size=512M $tb
  run "async write, 4 x QD8" async --rw=randwrite $q8 $tb
  if [ ${#bins[@]} -eq 1 ] && [ "$rounds" -eq 1 ]; then
    "$L" status --state-dir "$p" 2>/dev/null | grep -i -E "hit|l2|log" | head -8
  fi
  stop
}

: > "$w/results"
for round in $(seq "$rounds"); do
  for bi in $(seq 0 $((${#bins[@]} - 1))); do
    [ ${#bins[@]} -eq 1 ] && [ "$rounds" -eq 1 ] || echo "== round $round, binary ${letters[$bi]}: ${bins[$bi]}"
    one_set "${bins[$bi]}"
  done
done

[ ${#bins[@]} -eq 1 ] && [ "$rounds" -eq 1 ] && exit 0
python3 - "$w/results" "$rounds" "${bins[@]}" <<'PY'
import statistics, sys
path, rounds, bins = sys.argv[1], sys.argv[2], sys.argv[3:]
names = [chr(65 + i) for i in range(len(bins))]
order, us, iops = [], {}, {}
for line in open(path):
    b, _, name, u, i = line.rstrip('\n').split('\t')
    if name not in order: order.append(name)
    us.setdefault((name, int(b)), []).append(float(u)); iops.setdefault((name, int(b)), []).append(float(i))
print()
for n, b in zip(names, bins): print("%s = %s" % (n, b))
print("µs of larch CPU per operation, median of %s round(s); IOPS median" % rounds)
head = ["run"] + ["%s µs" % n for n in names] + ["%s/A" % n for n in names[1:]] + ["%s IOPS" % n for n in names]
print("| " + " | ".join(head) + " |"); print("|---" + "|---:" * (len(head) - 1) + "|")
for name in order:
    m = [statistics.median(us[(name, k)]) for k in range(len(bins))]
    r = [statistics.median(iops[(name, k)]) for k in range(len(bins))]
    cells = [name] + ["%.1f" % x for x in m] + ["%.2f" % (x / m[0]) for x in m[1:]] + ["%.0f" % x for x in r]
    print("| " + " | ".join(cells) + " |")
PY
