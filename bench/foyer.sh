#!/usr/bin/env bash
# larch's engine vs foyer's HybridCache (crates.io) on the hybrid DRAM + disk lookup path,
# in one process, same capacities and traces: 64 MiB DRAM, 512 MiB disk cache (O_DIRECT,
# under /tmp), 8 KiB blocks, a 2 GiB backing file read with pread on a miss. Traces: the
# first 300,000 requests of the ARC paper's OLTP trace and 300,000 Zipf(0.9) keys; each
# cache gets a warm-up pass then a measured pass, with 1 and 16 tokio tasks.
# bench/foyer/README.md says what each side does per lookup and what larch's tunables are.
#
#   bench/foyer.sh [JSON_PATH]        (default /tmp/foyer-results.json)
#
# Builds bench/foyer (a standalone cargo project, its own target dir) niced, then runs it.
# About 3 minutes on a 2-core machine once built (the first build takes ~2 minutes more).
set -euo pipefail
cd "$(dirname "$0")/.."
json=${1:-/tmp/foyer-results.json}
trace=../shared/traces/arc/OLTP.lis.zst
if [ ! -f "$trace" ]; then
    echo "error: trace file not found: $trace (the ARC paper traces live in ../shared/traces)" >&2
    exit 1
fi
export CARGO_TARGET_DIR=$PWD/bench/foyer/target
(cd bench/foyer && nice -n 10 cargo build --release --locked --quiet)
work=$(mktemp -d /tmp/larch-foyer.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmd=(bench/foyer/target/release/foyer-compare --oltp "$trace" --oltp-limit 300000
    --zipf-len 300000 --concurrency 1,16 --work "$work" --json "$json")
foyer_version=$(grep -A1 '^name = "foyer"$' bench/foyer/Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
echo "## larch engine vs foyer $foyer_version HybridCache (in-process, hybrid DRAM + disk lookups)"
echo
echo "date $(date -u '+%F %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (dirty tree)')"
echo "command: bench/foyer.sh $json  →  ${cmd[*]}"
echo
start=$SECONDS
"${cmd[@]}"
echo
echo "run took $((SECONDS - start)) s; JSON in $json"
