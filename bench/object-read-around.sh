#!/usr/bin/env bash
# `object_read_around` against 0 (issue 38): random 8K reads, cold then warm, on an object
# volume that a sequential fill wrote (so a block's neighbours sit next to it in its
# segment), for each setting in turn, on one Ceph RADOS Gateway (scripts/ceph-rgw).
#
#   bench/object-read-around.sh                 # seed 000's shape: 256 MiB working set,
#                                               # ARC 64 MiB + a 512 MiB cache device
#   WS=48M RT=10 ROUNDS=1 bench/object-read-around.sh   # a working set the ARC holds
#   SETTINGS="64K 64K+l2arc_noprefetch=0" bench/object-read-around.sh   # with other tunables
#
# Each setting starts with an empty ARC and a new cache device; fio (nbd engine) runs
# 2 jobs x QD4 of 8K random reads over the first WS for RT seconds cold, then again warm.
# Prints IOPS and the GETs larch made in each phase. LARCH_BIN picks the binary
# (default target/release/larch); needs root for Ceph's packages, fio, nbdinfo, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
L=${LARCH_BIN:-$REPO/target/release/larch}
WS=${WS:-256M} RT=${RT:-20} ROUNDS=${ROUNDS:-2} SETTINGS=${SETTINGS:-0 64K 256K}
MON_PORT=${MON_PORT:-6792} NBD_PORT=${NBD_PORT:-10897} HTTP_PORT=${HTTP_PORT:-10896}
WORK=$(mktemp -d /tmp/larch-read-around.XXXXXX)
CEPH=$WORK/ceph P=$WORK/pool CACHE=$WORK/l2.img LP=
cleanup() {
    [ -z "$LP" ] || kill -9 "$LP" 2>/dev/null || true
    "$REPO/scripts/ceph-rgw" stop "$CEPH" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=bench/ceph-start.sh
. "$REPO/bench/ceph-start.sh"
start_ceph "$CEPH" "$MON_PORT" 4294967296 "$WORK/ceph.log"
"$REPO/scripts/ceph-rgw" bucket "$CEPH" around >/dev/null
"$L" pool create p --state-dir "$P" --arc-max 64M >/dev/null
"$L" volume add v --backing s3://around/v --size 272M --volblocksize 8K --state-dir "$P" >/dev/null
start() {
    "$L" serve --state-dir "$P" --listen "127.0.0.1:$NBD_PORT" --http "127.0.0.1:$HTTP_PORT" >>"$WORK/larch.log" 2>&1 &
    LP=$!
    for _ in $(seq 600); do nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/v" >/dev/null 2>&1 && return; sleep 0.05; done
    echo "larch did not start" >&2
    exit 1
}
stop() { kill -TERM "$LP"; wait "$LP" || true; LP=; }
gets() { curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk '/^larch_object_gets_total/ { print $2 }'; }
start
fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$NBD_PORT/v" --rw=write --bs=1M --iodepth=16 \
    --size=272M --end_fsync=1 >/dev/null 2>&1
stop
echo "bench/object-read-around.sh $(date -u '+%F %T') UTC, $(nproc) CPUs, WS=$WS RT=$RT; $("$L" --version)"
for round in $(seq "$ROUNDS"); do
    for setting in $SETTINGS; do
        ra=${setting%%+*}
        "$L" cache remove "$CACHE" --state-dir "$P" >/dev/null 2>&1 || true
        rm -f "$CACHE"
        "$L" cache add "$CACHE" --size 512M --state-dir "$P" >/dev/null
        start
        "$L" set "object_read_around=$ra" --state-dir "$P" >/dev/null
        if [ "$setting" != "$ra" ]; then
            IFS=+ read -r -a extra <<<"${setting#*+}"
            "$L" set "${extra[@]}" --state-dir "$P" >/dev/null
        fi
        g0=$(gets)
        for phase in cold warm; do
            iops=$(fio --name=r --ioengine=nbd --uri="nbd://127.0.0.1:$NBD_PORT/v" --rw=randread --bs=8k \
                --iodepth=4 --numjobs=2 --size="$WS" --time_based --runtime="$RT" --group_reporting \
                --output-format=json 2>/dev/null | sed -n '/^{/,$p' |
                python3 -c 'import json, sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))')
            g1=$(gets)
            echo "round $round object_read_around=$setting $phase: $iops IOPS, $((g1 - g0)) GETs"
            g0=$g1
        done
        stop
    done
done
