#!/usr/bin/env bash
# NBD server throughput: larch serve-file vs nbdkit file on the same tmpfs file.
#
#   bench/nbd.sh                 # release build, 512 MiB file in /dev/shm, 8 s per run
#   RUNTIME=20 ROUNDS=5 SIZE_MB=1024 bench/nbd.sh
#   LARCH_BIN=/path/to/larch bench/nbd.sh
#
# For each server (larch with its default --io auto, which is inline on tmpfs; larch
# --io threads; nbdkit file) and transport
# (Unix socket, TCP on 127.0.0.1) it runs fio's nbd engine: 4K random read at iodepth 1
# and 32, and 128K sequential read at iodepth 8, one job each, unpinned. Then, over the
# Unix socket, 4K random reads with server and fio pinned to the same CPU and to different
# CPUs (taskset), because on a small VM the latency at iodepth 1 is mostly the cost of
# waking a thread on another (idle) vCPU. It prints a Markdown table with IOPS / MiB/s
# and the ratio of each larch row to nbdkit in the same run and placement. Every
# measurement is repeated ROUNDS times, servers interleaved, and the median is shown, so
# that drift in the machine's load hits all servers alike.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME=${RUNTIME:-5}
ROUNDS=${ROUNDS:-3}
SIZE_MB=${SIZE_MB:-512}
PORT=${PORT:-10899}
WORK=$(mktemp -d /dev/shm/larch-nbd-bench.XXXXXX)
IMG=$WORK/disk.img
PIDS=()

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in fio nbdkit; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio nbdkit)" >&2; exit 1; }
done
if [ -z "${LARCH_BIN:-}" ]; then
    cargo build --release --quiet -p larch
    LARCH_BIN=$PWD/target/release/larch
fi

head -c $((SIZE_MB << 20)) /dev/urandom > "$IMG"

start_server() { # kind transport cpus -> sets URI, appends pid
    local kind=$1 transport=$2 cpus=$3 sock=$WORK/s.sock
    local pin=(taskset -c "$cpus")
    rm -f "$sock"
    case $transport in
        unix) URI="nbd+unix:///?socket=$sock" ;;
        tcp) URI="nbd://127.0.0.1:$PORT/" ;;
    esac
    case $kind:$transport in
        larch-threads:unix) "${pin[@]}" "$LARCH_BIN" serve-file "$IMG" --socket "$sock" --io threads 2>/dev/null & ;;
        larch-threads:tcp) "${pin[@]}" "$LARCH_BIN" serve-file "$IMG" --listen "127.0.0.1:$PORT" --io threads 2>/dev/null & ;;
        larch:unix) "${pin[@]}" "$LARCH_BIN" serve-file "$IMG" --socket "$sock" 2>/dev/null & ;;
        larch:tcp) "${pin[@]}" "$LARCH_BIN" serve-file "$IMG" --listen "127.0.0.1:$PORT" 2>/dev/null & ;;
        nbdkit:unix) "${pin[@]}" nbdkit -f -U "$sock" file "$IMG" & ;;
        nbdkit:tcp) "${pin[@]}" nbdkit -f -i 127.0.0.1 -p "$PORT" file "$IMG" & ;;
    esac
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    for _ in $(seq 100); do
        nbdinfo --size "$URI" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "server $kind/$transport did not start" >&2
    exit 1
}

stop_server() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
}

run_fio() { # cpus rw bs iodepth -> prints "iops mibps"
    local cpus=$1
    shift
    taskset -c "$cpus" fio --output-format=json --name=b --ioengine=nbd --uri="$URI" --rw="$1" --bs="$2" \
        --iodepth="$3" --runtime="$RUNTIME" --time_based --ramp_time=1 2>/dev/null |
        sed -n '/^{/,$p' |
        python3 -c 'import json,sys; r=json.load(sys.stdin)["jobs"][0]["read"]; print(round(r["iops"]), round(r["bw_bytes"]/1048576, 1))'
}

ALL_CPUS=0-$(($(nproc) - 1))
SERVERS=(nbdkit larch larch-threads)
# scenario: label transport server-cpus fio-cpus workloads...
SCENARIOS=(
    "unix unix $ALL_CPUS $ALL_CPUS|randread 4k 1|randread 4k 32|read 128k 8"
    "tcp tcp $ALL_CPUS $ALL_CPUS|randread 4k 1|randread 4k 32|read 128k 8"
    "unix-same-cpu unix 0 0|randread 4k 1|randread 4k 32"
    "unix-cpu0-fio-cpu1 unix 0 1|randread 4k 1"
)

median() { # "iops mibps" lines on stdin -> the line with the median IOPS
    sort -n | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }'
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A RESULT
for round in $(seq "$ROUNDS"); do
    for scenario in "${SCENARIOS[@]}"; do
        IFS='|' read -r -a parts <<<"$scenario"
        read -r label transport scpus fcpus <<<"${parts[0]}"
        for kind in "${SERVERS[@]}"; do
            start_server "$kind" "$transport" "$scpus"
            for w in "${parts[@]:1}"; do
                # shellcheck disable=SC2086
                RESULT["$kind|$label|$w"]+="$(run_fio "$fcpus" $w)"$'\n'
            done
            stop_server
        done
    done
    echo "round $round done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
for key in "${!RESULT[@]}"; do
    RESULT[$key]=$(printf '%s' "${RESULT[$key]}" | median)
done

echo
echo "| placement | workload | server | IOPS | MiB/s | vs nbdkit |"
echo "|---|---|---|---:|---:|---:|"
for scenario in "${SCENARIOS[@]}"; do
    IFS='|' read -r -a parts <<<"$scenario"
    read -r label _ <<<"${parts[0]}"
    for w in "${parts[@]:1}"; do
        read -r base_iops _ <<<"${RESULT["nbdkit|$label|$w"]}"
        for kind in "${SERVERS[@]}"; do
            read -r iops mibps <<<"${RESULT["$kind|$label|$w"]}"
            ratio=$(python3 -c "print(f'{$iops / max($base_iops, 1):.2f}')")
            set -- $w
            echo "| $label | $1 $2 QD$3 | $kind | $iops | $mibps | $ratio |"
        done
    done
done
