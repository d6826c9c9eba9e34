#!/usr/bin/env bash
# Sequential reads and writes of object volumes (issue 38), binary against binary, with
# the CPU each process spent: what bounds them on a machine that runs the gateway too.
# Keep the machine otherwise idle (its load average is logged at the start).
#
#   bench/object-store-seq.sh BIN [BIN...]        # e.g. a build before and after a change
#   ROUNDS=3 VOL_MB=512 OUT=/tmp/seq bench/object-store-seq.sh old/larch target/release/larch
#
# One Ceph RADOS Gateway (scripts/ceph-rgw, memstore OSD of 8 GiB) for the whole run. Each
# round measures the gateway alone (256 PUTs then GETs of 1 MiB, 16 at once, one curl),
# then each binary in turn on a fresh bucket and pool (ARC_MAX ARC, no cache device, 8K
# blocks, the default segments layout):
#   write    fio 1 MiB sequential writes, QD16, over VOL_MB, ending with a flush (fsync):
#            timed until the flush is answered, so the data is on the store;
#   read     the daemon restarted (empty ARC), 1 MiB sequential reads, QD16;
#   read-qd1 restarted again, 128 KiB sequential reads, QD1 (a copy, a VM booting): what
#            the prefetcher alone keeps in flight.
# For every phase: MiB/s, the requests larch made (its counters) and the CPU seconds of
# larch, of the gateway and its OSD (radosgw + ceph-osd) and of the client (fio or curl),
# from /proc; results.md in OUT has the medians of the rounds and every round's figures.
# Needs root (apt-get of Ceph's packages), fio with its nbd engine, nbdinfo and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[ $# -ge 1 ] || { sed -n '2,20p' "$0"; exit 2; }
ROUNDS=${ROUNDS:-2} VOL_MB=${VOL_MB:-512} ARC_MAX=${ARC_MAX:-64M}
OUT=${OUT:-$(mktemp -d /tmp/larch-seq.XXXXXX)}
MON_PORT=${MON_PORT:-6791} NBD_PORT=${NBD_PORT:-10899} HTTP_PORT=${HTTP_PORT:-10898}
WORK=$(mktemp -d /tmp/larch-seq-work.XXXXXX)
CEPH=$WORK/ceph
mkdir -p "$OUT"
BINS=()
for b in "$@"; do
    cp "$b" "$WORK/larch-${#BINS[@]}"   # copied: a build during the run does not change it
    BINS+=("$WORK/larch-${#BINS[@]}")
done
LARCH_PID=
cleanup() {
    [ -z "$LARCH_PID" ] || kill -9 "$LARCH_PID" 2>/dev/null || true
    "$REPO/scripts/ceph-rgw" stop "$CEPH" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "$*" | tee -a "$OUT/run.log"; }

# shellcheck source=bench/ceph-start.sh
. "$REPO/bench/ceph-start.sh"
start_ceph "$CEPH" "$MON_PORT" 8589934592 "$OUT/ceph-start.log"
s3() {
    curl -sS --fail --no-progress-meter --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
        --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
cpu_of() { # PID... -> their user+system CPU seconds so far
    local t=0 p
    for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done
    awk -v t="$t" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}
GW_PIDS=("$(pgrep -f "radosgw -c $CEPH" | head -1 || true)" "$(pgrep -f "ceph-osd -c $CEPH" | head -1 || true)")
[ -n "${GW_PIDS[0]}" ] && [ -n "${GW_PIDS[1]}" ] || { echo "no radosgw or ceph-osd running: see $OUT/ceph-start.log" >&2; exit 1; }
now() { date +%s.%N; }
rate() { awk -v mb="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.1f", mb / (b - a) }'; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
declare -A R   # R[what|round] = "MiB/s larch_cpu gw_cpu client_cpu requests"

gateway_round() { # ROUND
    local op t0 t1 g0 g1 c1
    "$REPO/scripts/ceph-rgw" bucket "$CEPH" "raw$1" >/dev/null
    head -c 1M /dev/urandom >"$WORK/object"
    : >"$WORK/put.cfg"
    : >"$WORK/get.cfg"
    for i in $(seq 0 255); do
        printf 'upload-file = "%s"\nurl = "%s/raw%s/o%05d"\noutput = "/dev/null"\n' \
            "$WORK/object" "$AWS_ENDPOINT_URL" "$1" "$i" >>"$WORK/put.cfg"
        printf 'url = "%s/raw%s/o%05d"\noutput = "/dev/null"\n' "$AWS_ENDPOINT_URL" "$1" "$i" >>"$WORK/get.cfg"
    done
    for op in put get; do
        g0=$(cpu_of "${GW_PIDS[@]}") t0=$(now)
        /usr/bin/time -f '%U %S' -o "$WORK/curl.time" curl -sS --fail --no-progress-meter \
            --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
            -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -Z --parallel-max 16 -K "$WORK/$op.cfg" \
            -w '%{http_code}\n' >"$WORK/codes"
        t1=$(now) g1=$(cpu_of "${GW_PIDS[@]}")
        c1=$(awk '{ printf "%.2f", $1 + $2 }' "$WORK/curl.time")
        [ "$(grep -c '^200$' "$WORK/codes")" = 256 ] || { log "gateway $op: not all 256 answered 200"; exit 1; }
        R["gw-$op|$1"]="$(rate 256 "$t0" "$t1") - $(sub "$g0" "$g1") $c1 256"
        log "round $1 gateway $op: ${R["gw-$op|$1"]}"
    done
    purge "raw$1"
}

purge() { # BUCKET: its objects deleted, so that the OSD's memory store stays small
    radosgw-admin -c "$CEPH/ceph.conf" bucket rm --bucket="$1" --purge-objects >/dev/null 2>&1 ||
        log "could not purge bucket $1"
}
larch_start() { # BIN POOL
    "$1" serve --state-dir "$2" --listen "127.0.0.1:$NBD_PORT" --http "127.0.0.1:$HTTP_PORT" \
        >>"$OUT/larch.log" 2>&1 &
    LARCH_PID=$!
    for _ in $(seq 1200); do
        nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/v" >/dev/null 2>&1 && return 0
        kill -0 "$LARCH_PID" 2>/dev/null || { log "larch serve exited"; exit 1; }
        sleep 0.05
    done
    log "larch serve did not answer"
    exit 1
}
larch_stop() { kill -TERM "$LARCH_PID"; wait "$LARCH_PID" || true; LARCH_PID=; }
requests() { # the volume's GETs + PUTs so far
    curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" |
        awk '/^larch_object_(gets|puts)_total\{volume="v"\}/ { n += $2 } END { printf "%d", n }'
}
larch_phase() { # KEY ROUND fio-args...
    local key=$1 round=$2 t0 t1 l0 l1 g0 g1 c1 q0 q1
    shift 2
    q0=$(requests) l0=$(cpu_of "$LARCH_PID") g0=$(cpu_of "${GW_PIDS[@]}") t0=$(now)
    fio --name="$key" --ioengine=nbd --uri="nbd://127.0.0.1:$NBD_PORT/v" --size="${VOL_MB}M" \
        --output-format=json "$@" >"$WORK/fio.out" 2>"$OUT/fio-$key-$round.err" ||
        { cat "$OUT/fio-$key-$round.err"; exit 1; }
    t1=$(now) l1=$(cpu_of "$LARCH_PID") g1=$(cpu_of "${GW_PIDS[@]}") q1=$(requests)
    sed -n '/^{/,$p' "$WORK/fio.out" >"$OUT/fio-$key-$round.json"
    # fio's own CPU: its job's user and system shares of the job's run time.
    c1=$(python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))["jobs"][0]
print("%.2f" % ((j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000))' "$OUT/fio-$key-$round.json")
    R["$key|$round"]="$(rate "$VOL_MB" "$t0" "$t1") $(sub "$l0" "$l1") $(sub "$g0" "$g1") $c1 $((q1 - q0))"
    log "round $round $key: ${R["$key|$round"]}"
}

larch_round() { # ROUND INDEX
    local bin=${BINS[$2]} bucket="b$1x$2" pool=$WORK/pool-$1-$2
    "$REPO/scripts/ceph-rgw" bucket "$CEPH" "$bucket" >/dev/null
    "$bin" pool create p --state-dir "$pool" --arc-max "$ARC_MAX" >/dev/null
    "$bin" volume add v --backing "s3://$bucket/v" --size "${VOL_MB}M" --volblocksize 8K \
        --state-dir "$pool" >/dev/null
    larch_start "$bin" "$pool"
    larch_phase "write-$2" "$1" --rw=write --bs=1M --iodepth=16 --end_fsync=1
    larch_stop
    larch_start "$bin" "$pool"
    larch_phase "read-$2" "$1" --rw=read --bs=1M --iodepth=16
    larch_stop
    larch_start "$bin" "$pool"
    larch_phase "readqd1-$2" "$1" --rw=read --bs=128k --iodepth=1
    larch_stop
    purge "$bucket"
}

log "bench/object-store-seq.sh $(date -u '+%F %T') UTC on $(hostname), $(nproc) CPUs; VOL_MB=$VOL_MB ARC_MAX=$ARC_MAX ROUNDS=$ROUNDS; $(uptime)"
for i in "${!BINS[@]}"; do log "binary $i: $("${BINS[$i]}" --version) ($(basename "${@:$((i + 1)):1}"))"; done
log "fields: MiB/s, CPU s of larch, of radosgw+ceph-osd, of the client; requests to the store"
for round in $(seq "$ROUNDS"); do
    gateway_round "$round"
    for i in "${!BINS[@]}"; do larch_round "$round" "$i"; done
done

median_of() { # KEY FIELD -> the median over the rounds
    for round in $(seq "$ROUNDS"); do awk -v f="$2" '{ print $f }' <<<"${R["$1|$round"]}"; done |
        sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
per_mib() { awk -v s="$1" -v mb="$2" 'BEGIN { printf "%.2f", s * 1000 / mb }'; }
{
    echo "# Sequential I/O on object volumes, $(date -u +%F)"
    echo
    echo "Medians of $ROUNDS rounds; CPU in ms per MiB moved (larch / gateway+OSD / client)."
    echo
    echo "| what | MiB/s | x gateway | requests | CPU ms/MiB larch / gw+osd / client |"
    echo "|---|---:|---:|---:|---|"
    for op in put get; do
        echo "| gateway alone, 1 MiB ${op^^}s x16 | $(median_of "gw-$op" 1) | 1.00 | 256 | - / $(per_mib "$(median_of "gw-$op" 3)" 256) / $(per_mib "$(median_of "gw-$op" 4)" 256) |"
    done
    for i in "${!BINS[@]}"; do
        for phase in write read readqd1; do
            ref=$([ "$phase" = write ] && echo gw-put || echo gw-get)
            m=$(median_of "$phase-$i" 1)
            echo "| binary $i $phase | $m | $(awk -v a="$m" -v b="$(median_of "$ref" 1)" 'BEGIN { printf "%.2f", a / b }') | $(median_of "$phase-$i" 5) | $(per_mib "$(median_of "$phase-$i" 2)" "$VOL_MB") / $(per_mib "$(median_of "$phase-$i" 3)" "$VOL_MB") / $(per_mib "$(median_of "$phase-$i" 4)" "$VOL_MB") |"
        done
    done
} >"$OUT/results.md"
cat "$OUT/results.md"
