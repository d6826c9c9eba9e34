# shellcheck shell=bash
# Sourced by the object-store benchmarks: starts one Ceph RADOS Gateway with
# scripts/ceph-rgw and exports its S3 settings (AWS_ENDPOINT_URL, AWS_REGION, the keys).
#
#   . bench/ceph-start.sh
#   start_ceph DIR MON_PORT MEMSTORE_BYTES LOG    # exits the script if Ceph never started
#
# The OSD's first start fails now and then here ("wrong fsid"): it is tried three times,
# each from scratch. The caller stops it (scripts/ceph-rgw stop DIR) when done.
start_ceph() {
    local dir=$1 port=$2 memstore=$3 log=$4 attempt
    for attempt in 1 2 3; do
        CEPH_ARGS="--ms_mon_client_mode=crc --memstore_device_bytes=$memstore" MON_PORT=$port \
            "$REPO/scripts/ceph-rgw" start "$dir" >"$log" 2>&1 && break
        echo "Ceph did not start (attempt $attempt): $(grep 'ceph-rgw:' "$log" | tail -1)" >&2
        "$REPO/scripts/ceph-rgw" stop "$dir" >/dev/null 2>&1 || true
        rm -rf "$dir"
        [ "$attempt" -lt 3 ] || exit 1
        sleep 2
    done
    set -a
    # shellcheck source=/dev/null
    . "$dir/s3.env"
    set +a
}
