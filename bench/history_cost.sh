#!/bin/bash
# The history's cost on ARC hits (issue 15): larch serve with the history (the default),
# with --history off, and an optional baseline binary, alternating, two rounds.
# Usage: bench/history_cost.sh [BASELINE-LARCH]   (run from the repository, after
# `cargo build --release`; needs fio with its nbd engine). Prints "RUN JOBSxQD IOPS".
set -u
larch=${LARCH:-target/release/larch}
base=${1:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
uri="nbd+unix:///vol0?socket=$dir/nbd.sock"
run() { # NAME BINARY [ARGS...]
    local name=$1 bin=$2
    shift 2
    rm -rf "$dir/pool"
    "$bin" serve --state-dir "$dir/pool" --socket "$dir/nbd.sock" --http 127.0.0.1:0 \
        --demo-volume-size 64M --demo-cache-size 64M --demo-arc-max 128M "$@" 2>"$dir/log" &
    local pid=$!
    for _ in $(seq 100); do [ -S "$dir/nbd.sock" ] && break; sleep 0.2; done
    fio --name=w --ioengine=nbd --uri="$uri" --rw=randread --bs=4k --size=32M \
        --iodepth=8 --time_based --runtime=3 >/dev/null 2>&1
    for point in "4 8" "1 1"; do
        set -- $point
        fio --name=w --ioengine=nbd --uri="$uri" --rw=randread --bs=4k --size=32M \
            --numjobs="$1" --iodepth="$2" --group_reporting --time_based --runtime=8 \
            --output-format=json --output="$dir/fio.json" >/dev/null 2>&1
        echo "$name ${1}x${2} $(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['jobs'][0]['read']['iops']))" "$dir/fio.json")"
    done
    kill -INT "$pid"
    wait "$pid" 2>/dev/null
}
for _ in 1 2; do
    run on "$larch"
    run off "$larch" --history off
    [ -n "$base" ] && run base "$base"
done
