#!/bin/bash
# The seeds' setups through `larch sim run`, at full scale (docs/simulator.md, "The seeds
# reproduced"): each preset with and without its L2ARC, summaries as JSON and seed 000's
# run as a report page.
#
#   bench/sim_seeds.sh [OUT-DIR] [SCALE]     (default bench/results/sim-seeds-DATE, scale 1)
#   ONLY='seed002' bench/sim_seeds.sh ...      (only the setups whose name matches)
#
# At scale 1 it takes about an hour on the 2-core VM and up to ~8 GiB of memory (seed 002's
# prewarmed 1.2 TiB of 16K blocks); SCALE=100 runs the same in a minute or two.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/sim-seeds-$(date +%F)}
scale=${2:-1}
larch=${LARCH:-target/release/larch}
mkdir -p "$out"
sim() { # NAME ARGS...
    local name=$1
    shift
    # ONLY=REGEX runs the setups whose name matches.
    if [ -n "${ONLY:-}" ] && ! [[ "$name" =~ $ONLY ]]; then return; fi
    local started=$SECONDS
    /usr/bin/time -f "%M" -o "$out/$name.maxrss" "$larch" sim run --quiet --scale "$scale" "$@" \
        -o "$out/$name.json" > "$out/$name.txt"
    echo "$name: $((SECONDS - started)) s, peak RSS $(cat "$out/$name.maxrss") KiB"
    head -1 "$out/$name.txt"
}
# Seed 000: 30 h from cold, then the switch off for an hour and on again (its screenshots'
# left and right halves: the pool without its L2ARC, the ARC warm).
sim seed000 --preset seed000 --duration 32h --switch off@30h --switch on@31h --html "$out/seed000.html"
# Seed 000's RAID-Z2 wide stripe: 8 days from cold, and without cache devices. Eight
# virtual days at full size take about 1.5 h here; RAIDZ_SCALE (default 10) runs them at
# 1/10 (docs/simulator.md, "Scale"), shown at full size.
rz=${RAIDZ_SCALE:-10}
[ "$scale" -gt "$rz" ] && rz=$scale
scale=$rz sim seed000-raidz2 --preset seed000-raidz2
scale=$rz sim seed000-raidz2-nol2 --preset seed000-raidz2 --no-l2 --duration 2h --step 60s
scale=${2:-1}
# Seed 002: prewarmed, 4 x NVMe against none; 4K random reads, 128K sequential reads at 16
# threads per client, 4K random writes with OpenZFS's feed and with larch's.
sim seed002-randread --preset seed002-randread
sim seed002-randread-nol2 --preset seed002-randread --no-l2
sim seed002-seqread --preset seed002-seqread
sim seed002-seqread-nol2 --preset seed002-seqread --no-l2
sim seed002-randwrite --preset seed002-randwrite
sim seed002-randwrite-nol2 --preset seed002-randwrite --no-l2
sim seed002-randwrite-larchfeed --preset seed002-randwrite --feed larch
