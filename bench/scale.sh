#!/usr/bin/env bash
# Caches of real size (issue 18): the rebuild of a 64 GiB cache device of 8K records
# (~8.4M log entries) through the engine, and an 8 GiB ARC holding 1M blocks of 8K.
#
# MANUAL: not run by scripts/test. Needs root (it drops the page cache before each
# rebuild: echo 3 > /proc/sys/vm/drop_caches) and a file system with O_DIRECT. A real
# 64 GiB device would need ~70 GB of disk (device file, sparse volume files); this script
# keeps the device file sparse instead: the fill goes through larch-l2's real writer, but
# the records' sectors are dropped before they reach the file (crates/larch-engine/
# examples/scale.rs says how), so only the headers and log blocks are written: ~0.2 GB on
# disk for 64 GiB. The ARC part needs ~9 GiB of free RAM and reads holes of a sparse
# backing file (no disk space).
#
#   sudo bench/scale.sh                     # 64 GiB device, 3 cold rebuilds, 1M ARC blocks
#   GIB=16 RUNS=5 sudo bench/scale.sh
#   SCALE_DIR=/mnt/ssd/scale sudo bench/scale.sh
#
# It builds the release example it runs (`cargo build --release -p larch-engine --example
# scale`; CARGO_TARGET_DIR is honoured), prints every raw line, then a table of medians.
set -euo pipefail
cd "$(dirname "$0")/.."

GIB=${GIB:-64}
RUNS=${RUNS:-3}
ARC_BLOCKS=${ARC_BLOCKS:-1048576}
DIR=${SCALE_DIR:-/var/tmp/larch-scale}
TARGET=${CARGO_TARGET_DIR:-target}

if [ "$(id -u)" != 0 ]; then
    echo "bench/scale.sh: needs root to drop the page cache before each rebuild" >&2
    exit 1
fi
mkdir -p "$DIR"
DEV=$DIR/scale.dev
cleanup() { rm -f "$DEV" "$DIR"/scale.vol "$DIR"/scale-arc.vol; }
trap cleanup EXIT

cargo build --release --quiet -p larch-engine --example scale
BIN=$TARGET/release/examples/scale
RAW=$(mktemp)

echo "== fill: $GIB GiB cache device at $DEV (sparse)"
"$BIN" fill "$DEV" "$GIB" | tee -a "$RAW"
echo "on disk: $(du -k "$DEV" | cut -f1) KiB"

for run in $(seq "$RUNS"); do
    sync
    echo 3 > /proc/sys/vm/drop_caches
    echo "== log walk alone, run $run (cold)"
    "$BIN" walk "$DEV" | tee -a "$RAW"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    echo "== rebuild through the engine, run $run (cold)"
    "$BIN" rebuild "$DEV" | tee -a "$RAW"
done

echo "== ARC: $ARC_BLOCKS blocks of 8K into zfs_arc_max = 8 GiB"
"$BIN" arc "$DIR" "$ARC_BLOCKS" | tee -a "$RAW"

# Medians of the repeated lines, the single value of the others.
median() {
    grep "^$1: " "$RAW" | awk '{print $2}' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "-"; else print v[int((NR + 1) / 2)]}'
}
range() {
    grep "^$1: " "$RAW" | awk '{print $2}' | sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {print lo "–" hi}'
}

echo
echo "| figure | value |"
echo "|---|---|"
echo "| device | $GIB GiB, 8 KiB records, 4 KiB sectors; $(median records_written) records written, $(median log_blocks_written) log blocks ($(median log_bytes_written) bytes) |"
echo "| entries restored and indexed | $(median entries_indexed) (behind the evict hand's lead: $(median entries_evicted)) |"
echo "| rebuild through the engine, cold, median of $RUNS | $(median rebuild_seconds) s ($(range rebuild_seconds) s) |"
echo "| entries/s, median | $(median entries_per_second) |"
echo "| log walk alone (read, verify, decode), median | $(median walk_seconds) s ($(range walk_seconds) s) |"
echo "| steady index (l2_hdr_size / entries) | $(median index_bytes_per_entry) B/entry |"
echo "| resident-set peak growth / entries | $(median rss_peak_growth_per_entry) B/entry |"
echo "| transient: peak RSS growth − index, / entries | $(median rss_transient_per_entry) B/entry |"
echo "| transient: heap peak − heap after, / entries | $(median heap_transient_per_entry) B/entry |"
echo "| ARC: blocks held of $ARC_BLOCKS read | $(median blocks_held) (arcstat size $(median arcstat_size), c_max $(median arcstat_c_max)) |"
echo "| ARC: hdr_size / block (the engine's accounting) | $(median hdr_bytes_per_block) B |"
echo "| ARC: resident-set growth / block − 8 KiB | $(median rss_growth_per_block_minus_data) B |"
echo "| ARC: heap growth / block − 8 KiB | $(median heap_growth_per_block_minus_data) B |"
rm -f "$RAW"
