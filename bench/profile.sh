#!/usr/bin/env bash
# perf profiles of two paths of `larch serve` (issue 18 asks for them before and after its
# changes): the async write path (fio 1 MiB sequential writes, QD8, into a file-backed
# volume: the syncer's TXG writes are in the profile) and the L2 hit path (4K random reads
# from a warmed cache device with a small ARC, at 1 job x QD1 and at 4 jobs x QD8). For
# each it records the daemon's threads with call graphs for SECONDS while fio runs, and
# writes `perf report`'s flat and caller views plus fio's figures to OUT.
#
#   bench/profile.sh OUT-DIR            # release build, 10 s profiles
#   SECONDS_=20 LARCH_BIN=... bench/profile.sh OUT-DIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/profile.sh OUT-DIR}
PROFILE_S=${SECONDS_:-10}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /var/tmp/larch-profile.XXXXXX)
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
for tool in fio perf; do command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }; done
if [ -z "${LARCH_BIN:-}" ]; then
    cargo build --release --quiet --bin larch
    LARCH_BIN=$PWD/target/release/larch
fi
L=$LARCH_BIN

serve() { # STATE-DIR
    "$L" serve --state-dir "$1" --socket "$WORK/nbd.sock" --http off 2>>"$WORK/serve.log" &
    PID=$!
    for _ in $(seq 300); do [ -S "$WORK/nbd.sock" ] && return; sleep 0.1; done
    echo "larch serve did not start" >&2; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""; rm -f "$WORK/nbd.sock"; }
uri() { echo "nbd+unix:///vol?socket=$WORK/nbd.sock"; }
profile() { # NAME FIO-ARGS... : fio in the background, perf on the daemon meanwhile
    local name=$1
    shift
    fio --name="$name" --ioengine=nbd --uri="$(uri)" --time_based --runtime=$((PROFILE_S + 6)) \
        --output-format=json "$@" --output="$WORK/$name.fio.json" >/dev/null &
    local fio_pid=$!
    sleep 3
    perf record -q -F 999 -g -p "$PID" -o "$WORK/$name.data" -- sleep "$PROFILE_S" 2>/dev/null
    wait "$fio_pid"
    # perf pads every line to its widest symbol and adds empty IPC columns: trimmed.
    local trim=(sed -E -e 's/[[:space:]]+-[[:space:]]+-[[:space:]]*$//' -e 's/[[:space:]]+$//' -e '/^# \.\.\./d')
    perf report -i "$WORK/$name.data" --no-children --stdio --percent-limit 0.5 \
        --sort dso,symbol -g none 2>/dev/null | "${trim[@]}" >"$OUT/$name.flat.txt"
    perf report -i "$WORK/$name.data" --children --stdio --percent-limit 2 \
        --sort symbol -g caller,0.5,callee --max-stack 24 2>/dev/null | "${trim[@]}" \
        >"$OUT/$name.callers.txt"
    python3 - "$WORK/$name.fio.json" >"$OUT/$name.fio.txt" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
job = json.loads(t[t.index("{"):])["jobs"][0]
for kind in ("read", "write"):
    d = job[kind]
    if d["io_bytes"]:
        p = d["clat_ns"].get("percentile", {})
        print("%s: %.0f IOPS, %.1f MiB/s, mean %.1f us, p99 %.1f us" % (
            kind, d["iops"], d["bw"] / 1024, d["clat_ns"]["mean"] / 1000,
            p.get("99.000000", 0) / 1000))
PY
    echo "$name: $(cat "$OUT/$name.fio.txt")" >&2
}

# 1. Async writes: 1 GiB file-backed volume, 256 MiB ARC, no cache device.
"$L" pool create prof --state-dir "$WORK/w" --arc-max 256M >/dev/null
truncate -s 1G "$WORK/w-vol.img"
"$L" volume add vol --backing "$WORK/w-vol.img" --size 1G --state-dir "$WORK/w" >/dev/null
serve "$WORK/w"
profile write-path --rw=write --bs=1M --iodepth=8 --size=1G
stop

# 2. L2 hits: 256 MiB volume, 32 MiB ARC, 512 MiB cache device, warmed first.
"$L" pool create prof --state-dir "$WORK/l" --arc-max 32M >/dev/null
head -c $((256 << 20)) /dev/urandom >"$WORK/l-vol.img"
"$L" volume add vol --backing "$WORK/l-vol.img" --size 256M --state-dir "$WORK/l" >/dev/null
"$L" cache add "$WORK/l-cache.img" --size 512M --state-dir "$WORK/l" >/dev/null
"$L" set l2arc_write_max=256M --state-dir "$WORK/l" >/dev/null
serve "$WORK/l"
fio --name=warm --ioengine=nbd --uri="$(uri)" --rw=randread --bs=4k --size=256M --iodepth=8 \
    --numjobs=2 --time_based --runtime=45 >/dev/null
profile l2-hit-qd1 --rw=randread --bs=4k --size=256M --iodepth=1
profile l2-hit-4x8 --rw=randread --bs=4k --size=256M --iodepth=8 --numjobs=4 --group_reporting
"$L" status --state-dir "$WORK/l" --json | python3 -c '
import json, sys
a = json.load(sys.stdin)["arcstats"]
print("L2 pool: hits %d, l2_hits %d, l2_misses %d" % (a["hits"], a["l2_hits"], a["l2_misses"]))' \
    | tee "$OUT/l2-pool.txt" >&2
stop
{
    echo "bench/profile.sh, ${PROFILE_S}s profiles, $(date -u +%F), $(nproc) CPUs,"
    echo "commit $(git rev-parse --short HEAD), $("$L" --version)"
} >"$OUT/README.txt"
echo "profiles in $OUT" >&2
