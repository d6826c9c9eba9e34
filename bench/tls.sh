#!/usr/bin/env bash
# NBD over TLS vs plaintext (issue 20): ARC hits and L2 hits of larch, and nbdkit's memory
# plugin, each with and without TLS, through fio's nbd engine in the same run.
#
#   bench/tls.sh                      # release build, 3 rounds of 8 s per measurement
#   ROUNDS=5 RUNTIME=10 bench/tls.sh
#   LARCH_BIN=/path/to/larch bench/tls.sh
#
# One larch daemon serves plaintext and TLS at once (--tls on), so both see the same
# cache: a 256 MiB volume in a 512 MiB ARC (every read an ARC hit after one pass), and a
# second pool with a 32 MiB ARC and a 512 MiB cache device warmed before measuring (most
# reads L2 hits; the share measured is printed). nbdkit serves a 256 MiB memory export
# with --tls=require, and another without. Clients: fio 4K random reads, 1 job at
# iodepth 1 and 4 jobs at iodepth 8. TLS clients take their credentials from
# $HOME/.pki/libnbd (fio's URI may not name files). Rounds interleave the systems; the
# median of the rounds is shown, with each TLS figure's ratio to its plaintext one.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME=${RUNTIME:-8}
ROUNDS=${ROUNDS:-3}
WORK=$(mktemp -d /var/tmp/larch-tls-bench.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in fio nbdkit openssl; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
done
if [ -z "${LARCH_BIN:-}" ]; then
    cargo build --release --quiet --bin larch
    LARCH_BIN=$PWD/target/release/larch
fi

crates/larch/tests/tls/make-certs.sh "$WORK/certs"
export HOME=$WORK/home
mkdir -p "$HOME/.pki/libnbd"
cp "$WORK"/certs/alice/{ca-cert.pem,client-cert.pem,client-key.pem} "$HOME/.pki/libnbd/"
SERVER_CERTS=$WORK/certs/server

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    local port=$1 i
    for i in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on $port" >&2
    exit 1
}

# larch: ARC pool and L2 pool, each on its own port, TLS on (plaintext served too).
make_pool() { # DIR ARC-MAX [CACHE-SIZE]
    local dir=$1
    "$LARCH_BIN" pool create bench --state-dir "$dir" --arc-max "$2" >/dev/null
    truncate -s 256M "$dir/vol.img"
    "$LARCH_BIN" volume add vol --backing "$dir/vol.img" --size 256M --state-dir "$dir" >/dev/null
    if [ $# -ge 3 ]; then
        "$LARCH_BIN" cache add "$dir/cache.img" --size "$3" --state-dir "$dir" >/dev/null
    fi
}
serve_larch() { # DIR PORT
    "$LARCH_BIN" serve --state-dir "$1" --listen "127.0.0.1:$2" --http off \
        --tls on --tls-certificates "$SERVER_CERTS" 2>>"$WORK/larch.log" &
    PIDS+=($!)
    wait_port "$2"
}
ARC_PORT=$(free_port); make_pool "$WORK/arc" 512M; serve_larch "$WORK/arc" "$ARC_PORT"
L2_PORT=$(free_port); make_pool "$WORK/l2" 32M 512M; serve_larch "$WORK/l2" "$L2_PORT"
MEM_PORT=$(free_port); MEMTLS_PORT=$(free_port)
nbdkit -f -i 127.0.0.1 -p "$MEM_PORT" memory 256M 2>>"$WORK/nbdkit.log" & PIDS+=($!)
nbdkit -f -i 127.0.0.1 -p "$MEMTLS_PORT" --tls=require --tls-certificates="$SERVER_CERTS" \
    memory 256M 2>>"$WORK/nbdkit.log" & PIDS+=($!)
wait_port "$MEM_PORT"; wait_port "$MEMTLS_PORT"

fio_iops() { # URI JOBS DEPTH RUNTIME [RW] -> IOPS (sum over jobs)
    fio --name=b --ioengine=nbd --uri="$1" --rw="${5:-randread}" --bs=4k --size=256M \
        --numjobs="$2" --iodepth="$3" --time_based --runtime="$4" --group_reporting \
        --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; t=sys.stdin.read(); print(int(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"]))'
}

# (fio's nbd engine prints "connected" on standard output before its JSON.)
# Fill the volumes (fio writes), read them once into the ARC, and warm the L2ARC.
for port in "$ARC_PORT" "$L2_PORT"; do
    fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$port/vol" --rw=write --bs=1M \
        --size=256M >/dev/null
done
"$LARCH_BIN" set l2arc_write_max=256M --state-dir "$WORK/l2" >/dev/null
fio_iops "nbd://127.0.0.1:$ARC_PORT/vol" 1 8 5 read >/dev/null
echo "warming the L2ARC (60 s)..." >&2
fio_iops "nbd://127.0.0.1:$L2_PORT/vol" 2 8 60 >/dev/null
"$LARCH_BIN" set l2arc_write_max=32M --state-dir "$WORK/l2" >/dev/null

stat_of() { # DIR NAME
    "$LARCH_BIN" status --json --state-dir "$1" |
        python3 -c "import json,sys; print(json.load(sys.stdin)['arcstats']['$2'])"
}

SYSTEMS=(
    "larch ARC hits|nbd://127.0.0.1:$ARC_PORT/vol|nbds://localhost:$ARC_PORT/vol"
    "larch L2 hits|nbd://127.0.0.1:$L2_PORT/vol|nbds://localhost:$L2_PORT/vol"
    "nbdkit memory|nbd://127.0.0.1:$MEM_PORT/|nbds://localhost:$MEMTLS_PORT/"
)
SHAPES=("1 1" "4 8")
declare -A RESULTS
l2_hits0=$(stat_of "$WORK/l2" l2_hits); l2_miss0=$(stat_of "$WORK/l2" l2_misses)
arc_hits0=$(stat_of "$WORK/l2" hits)
for round in $(seq "$ROUNDS"); do
    for system in "${SYSTEMS[@]}"; do
        IFS='|' read -r name plain tls <<<"$system"
        for shape in "${SHAPES[@]}"; do
            read -r jobs depth <<<"$shape"
            for mode in plain tls; do
                uri=$plain; [ "$mode" = tls ] && uri=$tls
                iops=$(fio_iops "$uri" "$jobs" "$depth" "$RUNTIME")
                RESULTS["$name|$shape|$mode"]+="$iops "
                echo "round $round: $name ${jobs}x QD$depth $mode: $iops IOPS" >&2
            done
        done
    done
done
l2_hits=$(( $(stat_of "$WORK/l2" l2_hits) - l2_hits0 ))
l2_miss=$(( $(stat_of "$WORK/l2" l2_misses) - l2_miss0 ))
arc_hits=$(( $(stat_of "$WORK/l2" hits) - arc_hits0 ))

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
echo "| System | Clients | Plaintext IOPS | TLS IOPS | TLS / plaintext |"
echo "|---|---|---:|---:|---:|"
for system in "${SYSTEMS[@]}"; do
    IFS='|' read -r name _ _ <<<"$system"
    for shape in "${SHAPES[@]}"; do
        read -r jobs depth <<<"$shape"
        p=$(echo "${RESULTS["$name|$shape|plain"]}" | median)
        t=$(echo "${RESULTS["$name|$shape|tls"]}" | median)
        printf '| %s | %s x QD%s | %s | %s | %.2f |\n' "$name" "$jobs" "$depth" "$p" "$t" \
            "$(python3 -c "print($t / $p)")"
    done
done
for shape in "${SHAPES[@]}"; do
    read -r jobs depth <<<"$shape"
    lt=$(echo "${RESULTS["larch ARC hits|$shape|tls"]}" | median)
    nt=$(echo "${RESULTS["nbdkit memory|$shape|tls"]}" | median)
    printf '\nlarch ARC hits over TLS / nbdkit memory with --tls=require, %s x QD%s: %.2f' \
        "$jobs" "$depth" "$(python3 -c "print($lt / $nt)")"
done
echo
total=$((arc_hits + l2_hits + l2_miss))
echo "L2 pool during the measurements: $l2_hits L2 hits, $arc_hits ARC hits, $l2_miss L2 misses" \
    "($(python3 -c "print(round(100 * $l2_hits / max($total, 1), 1))")% of reads from L2)"
echo "rounds: $ROUNDS x ${RUNTIME}s; $(nproc) CPUs; $(date -u +%F); commit $(git rev-parse --short HEAD)"
