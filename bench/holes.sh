#!/usr/bin/env bash
# Sparse volumes, TRIM and WRITE_ZEROES as clients use them (issue 39): how long copying
# a sparse volume takes against copying just its data, and what a whole-volume discard
# costs. Figures, not assertions (BENCHMARKS.md, "Issue 39").
#
#   bench/holes.sh [LARCH_BINARY]     (VOL=8G DATA_MB=64 by default)
#
# Rows, each timed once per round (ROUNDS, default 3), the median printed:
#   copy-dense   nbdcopy of a DATA_MB volume that is all data (the baseline: time for the
#                data alone)
#   copy-sparse  nbdcopy of a VOL volume holding the same DATA_MB of data in 8 runs
#                (nbdcopy asks block status and skips the holes)
#   convert      qemu-img convert of the sparse volume to a sparse raw file
#   copy-sparse-qemu-nbd  the peer: nbdcopy of a sparse copy of the same file served by
#                qemu-nbd (no cache), same client
#   discard-all  TRIM of the whole sparse volume, then FLUSH (what mkfs or blkdiscard send)
#   zero-all     WRITE_ZEROES with FAST_ZERO of the whole volume, then FLUSH (qemu-img
#                convert's first step on a target), after the discard
set -euo pipefail
LARCH=${1:-target/release/larch}
LARCH=$(realpath "$LARCH")
VOL=${VOL:-8G}
DATA_MB=${DATA_MB:-64}
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
WORK=$(mktemp -d /var/tmp/larch-holes.XXXXXX)
OUT=${OUT:-bench/results/$(date +%F)-issue39-holes}
mkdir -p "$OUT"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# pool NAME SIZE: a stopped pool with one file volume vol0 of SIZE (16K blocks).
pool() {
    local dir=$WORK/$1
    "$LARCH" pool create "$1" --state-dir "$dir" --arc-max 256M >/dev/null
    "$LARCH" volume add vol0 --backing "$dir/vol0.img" --size "$2" \
        --state-dir "$dir" >/dev/null
}

# serve NAME: starts the pool's daemon; prints its NBD URI once the socket exists.
serve() {
    local dir=$WORK/$1
    "$LARCH" serve --state-dir "$dir" --socket "$dir.sock" --http off \
        >"$dir.log" 2>&1 &
    for _ in $(seq 300); do [ -S "$dir.sock" ] && break; sleep 0.1; done
    echo "nbd+unix:///vol0?socket=$dir.sock"
}

# seconds CMD...: wall-clock seconds of one command.
seconds() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# fill URI SPAN_BYTES: DATA_MB of random data in 8 runs spread over SPAN_BYTES, flushed.
fill() {
    "$PY" - "$1" "$2" "$DATA_MB" <<'EOF'
import os, sys, nbd
uri, span, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
h = nbd.NBD(); h.connect_uri(uri)
run = mb * 2**20 // 8
for i in range(8):
    at = (span // 8) * i
    for off in range(0, run, 2**20):
        h.pwrite(os.urandom(min(2**20, run - off)), at + off)
h.flush(); h.shutdown()
EOF
}

# whole URI OP: TRIM ("trim") or FAST_ZERO WRITE_ZEROES ("zero") of the whole volume in
# 1 GiB requests, then FLUSH.
whole() {
    "$PY" - "$1" "$2" <<'EOF'
import sys, nbd
uri, op = sys.argv[1], sys.argv[2]
h = nbd.NBD(); h.connect_uri(uri)
size, step = h.get_size(), 2**30
for at in range(0, size, step):
    n = min(step, size - at)
    if op == "trim":
        h.trim(n, at)
    else:
        h.zero(n, at, nbd.CMD_FLAG_FAST_ZERO)
h.flush(); h.shutdown()
EOF
}

pool dense "${DATA_MB}M"
pool sparse "$VOL"
dense=$(serve dense)
sparse=$(serve sparse)
fill "$dense" $((DATA_MB << 20))
fill "$sparse" "$("$PY" -c "import nbd; h=nbd.NBD(); h.connect_uri('$sparse'); print(h.get_size())")"

cp --sparse=always "$WORK/sparse/vol0.img" "$WORK/peer.img"
qemu-nbd -f raw --cache=none --aio=io_uring --socket "$WORK/peer.sock" --persistent \
    --shared=4 "$WORK/peer.img" &
for _ in $(seq 100); do [ -S "$WORK/peer.sock" ] && break; sleep 0.1; done
peer="nbd+unix:///?socket=$WORK/peer.sock"

declare -A times
for _ in $(seq "$ROUNDS"); do
    times[copy-sparse-qemu-nbd]+="$(seconds nbdcopy "$peer" null:) "
    times[copy-dense]+="$(seconds nbdcopy "$dense" null:) "
    times[copy-sparse]+="$(seconds nbdcopy "$sparse" null:) "
    rm -f "$WORK/out.img"
    times[convert]+="$(seconds qemu-img convert -O raw "$sparse" "$WORK/out.img") "
done
times[discard-all]=$(seconds whole "$sparse" trim)
times[zero-all]=$(seconds whole "$sparse" zero)
allocated=$(du -k "$WORK/sparse/vol0.img" | cut -f1)

{
    echo "# bench/holes.sh $(date -u +%FT%TZ) $(hostname) $(git rev-parse --short HEAD)"
    echo "# volume $VOL with ${DATA_MB} MiB of data; $ROUNDS rounds; seconds (median)"
    for row in copy-dense copy-sparse copy-sparse-qemu-nbd convert discard-all zero-all; do
        m=$(echo "${times[$row]}" | tr ' ' '\n' | grep . | median)
        printf '%-20s %8.3f   (%s)\n' "$row" "$m" "${times[$row]}"
    done
    echo "allocated after discard and zero: ${allocated} KiB"
} | tee "$OUT/summary.txt"
