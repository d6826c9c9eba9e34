#!/usr/bin/env bash
# What a large object volume's map costs each commit (issue 38: the tree of map pages),
# binary against binary. Keep the machine otherwise idle.
#
#   bench/object-map-tree.sh BIN [BIN...]          # e.g. a build before and after a change
#   VOL=64G WRITES=40000 SYNC_WRITES=300 READS=20000 ARC=64M OUT=/tmp/tree \
#       bench/object-map-tree.sh old new
#   L2=512M ...   # each pool with a cache device of that size (empty at the start)
#
# One Ceph RADOS Gateway (scripts/ceph-rgw, memstore OSD of 8 GiB). For each binary, on a
# fresh bucket and pool (4 KiB blocks, the default segments layout, 64 MiB ARC):
#   spread   WRITES random 4 KiB writes over a VOL volume (QD16, then a flush), each
#            block once (no segment left sparse to repack), so that most of its
#            block-map pages (1,024 blocks each) are written;
#   reopen   the daemon restarted: the time until it serves (its open reads the map);
#   settle   40 writes each with a flush, unmeasured: the checkpoint that writes every
#            block-map page the spread's map logs changed comes in these;
#   sync     SYNC_WRITES random 4 KiB writes, each followed by a flush (fio --fsync=1,
#            QD1): every one a commit, whose root names every page (or, with index
#            pages, the top level only). Reported: writes/s, mean and p99 latency, the
#            bytes larch PUT per commit, and the root's size on the store;
#   memory   the daemon's resident memory (ps RSS) and the map it holds outside the
#            ARC (larch_object_map_bytes, where the binary reports it);
#   reads    READS random 4 KiB reads over the whole volume (QD16; most are holes, most
#            in a written block-map page), twice: IOPS of each pass, the block-map pages
#            read from the store, the RSS after;
#   reopen   the daemon restarted once more, now that every page is written: the time
#            until it serves (a map of more than 1,024 pages is counted after that).
# results.md in OUT has every figure. Needs root (Ceph's packages), fio with its nbd
# engine, nbdinfo and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[ $# -ge 1 ] || { sed -n '2,18p' "$0"; exit 2; }
VOL=${VOL:-64G} WRITES=${WRITES:-40000} SYNC_WRITES=${SYNC_WRITES:-300} READS=${READS:-20000}
ARC=${ARC:-64M}
L2=${L2:-}
OUT=${OUT:-$(mktemp -d /tmp/larch-tree.XXXXXX)}
MON_PORT=${MON_PORT:-6793} NBD_PORT=${NBD_PORT:-10897} HTTP_PORT=${HTTP_PORT:-10896}
WORK=$(mktemp -d /tmp/larch-tree-work.XXXXXX)
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
now() { date +%s.%N; }
root_bytes() { # BUCKET -> the size of the volume's root object
    curl -sS --fail --no-progress-meter --head --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
        --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
        "$AWS_ENDPOINT_URL/$1/v/larch-volume" | awk -F': ' 'tolower($1) == "content-length" { print $2 + 0 }'
}
metric() { # NAME -> the volume's counter
    curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" |
        awk -v n="$1" '$1 == n "{volume=\"v\"}" { printf "%d", $2 }'
}
pool_metric() { # NAME -> the pool's counter (no labels)
    curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v n="$1" '$1 == n { printf "%d", $2 }'
}
larch_start() { # BIN POOL; OPENED = seconds until it served
    local t0
    t0=$(now)
    "$1" serve --state-dir "$2" --listen "127.0.0.1:$NBD_PORT" --http "127.0.0.1:$HTTP_PORT" \
        >>"$OUT/larch.log" 2>&1 &
    LARCH_PID=$!
    for _ in $(seq 6000); do
        if nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/v" >/dev/null 2>&1; then
            OPENED=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
            return 0
        fi
        kill -0 "$LARCH_PID" 2>/dev/null || { log "larch serve exited"; exit 1; }
        sleep 0.05
    done
    log "larch serve did not answer"
    exit 1
}
larch_stop() { kill -TERM "$LARCH_PID"; wait "$LARCH_PID" || true; LARCH_PID=; }
fio_nbd() { # NAME fio-args...
    local name=$1
    shift
    fio --name="$name" --ioengine=nbd --uri="nbd://127.0.0.1:$NBD_PORT/v" --size="$VOL" \
        --output-format=json "$@" >"$WORK/fio.out" 2>"$OUT/fio-$name.err" ||
        { cat "$OUT/fio-$name.err"; exit 1; }
    sed -n '/^{/,$p' "$WORK/fio.out" >"$OUT/fio-$name.json"
}

log "bench/object-map-tree.sh $(date -u '+%F %T') UTC on $(hostname), $(nproc) CPUs; VOL=$VOL WRITES=$WRITES SYNC_WRITES=$SYNC_WRITES; $(uptime)"
ROWS=()
for i in "${!BINS[@]}"; do
    bin=${BINS[$i]} bucket="tree$i" pool=$WORK/pool-$i
    log "binary $i: $("$bin" --version) ($(basename "${@:$((i + 1)):1}"))"
    "$REPO/scripts/ceph-rgw" bucket "$CEPH" "$bucket" >/dev/null
    "$bin" pool create p --state-dir "$pool" --arc-max "$ARC" >/dev/null
    "$bin" volume add v --backing "s3://$bucket/v" --size "$VOL" --volblocksize 4K \
        --state-dir "$pool" >/dev/null
    [ -z "$L2" ] || "$bin" cache add "$WORK/l2-$i.img" --size "$L2" --state-dir "$pool" >/dev/null
    larch_start "$bin" "$pool"
    fio_nbd "spread-$i" --rw=randwrite --bs=4k --iodepth=16 --number_ios="$WRITES" \
        --randrepeat=0 --end_fsync=1
    larch_stop
    larch_start "$bin" "$pool"
    opened=$OPENED
    # Enough commits that the checkpoint folding the spread's map logs (every block-map
    # page it touched, written once) comes before the measured ones.
    fio_nbd "settle-$i" --rw=randwrite --bs=4k --iodepth=1 --fsync=1 --number_ios=40 \
        --norandommap --randrepeat=0
    p0=$(metric larch_object_puts_total) b0=$(metric larch_object_put_bytes_total)
    c0=$(metric larch_object_commits_total)
    fio_nbd "sync-$i" --rw=randwrite --bs=4k --iodepth=1 --fsync=1 --number_ios="$SYNC_WRITES" \
        --norandommap --randrepeat=0
    p1=$(metric larch_object_puts_total) b1=$(metric larch_object_put_bytes_total)
    c1=$(metric larch_object_commits_total)
    root=$(root_bytes "$bucket")
    rss_sync=$(ps -o rss= -p "$LARCH_PID" | awk '{ printf "%.0f", $1 / 1024 }')
    map_mib=$(metric larch_object_map_bytes | awk '{ if ($1 == "") print "-"; else printf "%.1f", $1 / 1048576 }')
    g0=$(metric larch_object_map_page_gets_total) h0=$(pool_metric larch_arcstats_l2_hits_total)
    fio_nbd "read1-$i" --rw=randread --bs=4k --iodepth=16 --number_ios="$READS" --norandommap --randrepeat=0
    fio_nbd "read2-$i" --rw=randread --bs=4k --iodepth=16 --number_ios="$READS" --norandommap --randrepeat=0
    g1=$(metric larch_object_map_page_gets_total) h1=$(pool_metric larch_arcstats_l2_hits_total)
    l2_hits=$((${h1:-0} - ${h0:-0}))
    page_gets=$([ -n "$g0" ] && echo $((g1 - g0)) || echo -)
    rss_read=$(ps -o rss= -p "$LARCH_PID" | awk '{ printf "%.0f", $1 / 1024 }')
    larch_stop
    larch_start "$bin" "$pool"
    reopened=$OPENED
    larch_stop
    row=$(python3 - "$OUT/fio-sync-$i.json" "$opened" "$((p1 - p0))" "$((b1 - b0))" "$((c1 - c0))" "$root" "$i" \
        "$rss_sync" "$map_mib" "$OUT/fio-read1-$i.json" "$OUT/fio-read2-$i.json" "$page_gets" "$rss_read" "$reopened" "$l2_hits" <<'EOF'
import json, sys
path, opened, puts, put_bytes, commits, root, i, rss_sync, map_mib, r1, r2, page_gets, rss_read, reopened, l2_hits = sys.argv[1:]
iops = lambda p: json.load(open(p))["jobs"][0]["read"]["iops"]
w = json.load(open(path))["jobs"][0]["write"]
sync = json.load(open(path))["jobs"][0].get("sync", {})
commits = max(int(commits), 1)
lat = sync.get("lat_ns", {})
p99 = lat.get("percentile", {}).get("99.000000", 0) / 1e6
print(f"| binary {i} | {opened} | {w['iops']:.1f} | {lat.get('mean', 0) / 1e6:.1f} | {p99:.1f} | "
      f"{int(commits)} | {int(puts) / commits:.1f} | {int(put_bytes) / commits / 1024:.1f} | {int(root) / 1024:.1f} | "
      f"{rss_sync} | {map_mib} | {iops(r1):.0f} | {iops(r2):.0f} | {page_gets} | {l2_hits} | {rss_read} | {reopened} |")
EOF
)
    log "$row"
    ROWS+=("$row")
    radosgw-admin -c "$CEPH/ceph.conf" bucket rm --bucket="$bucket" --purge-objects >/dev/null 2>&1 ||
        log "could not purge bucket $bucket"
done
{
    echo "# A large object volume's map per commit, $(date -u +%F)"
    echo
    echo "VOL=$VOL of 4 KiB blocks, ARC $ARC${L2:+, a cache device of $L2}, $WRITES random writes spread over it first, then $SYNC_WRITES random 4 KiB writes each with a flush (QD1), then two passes of $READS random 4 KiB reads (QD16)."
    echo
    echo "| binary | open s | sync writes/s | flush mean ms | flush p99 ms | commits | PUTs/commit | KiB PUT/commit | root KiB | RSS MiB | map MiB | reads/s 1 | reads/s 2 | pages read | L2 hits | RSS after reads MiB | reopen s |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
} >"$OUT/results.md"
cat "$OUT/results.md"
