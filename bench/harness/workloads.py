"""The sizes of a quick and a full run, and the fio jobs of every workload.

Every size derives from two: the ARC (`zfs_arc_max`) and the cache device (L2). The
workloads' regions are then placed against them: a working set in the ARC, one bigger
than the ARC but within ARC + L2 (the seed-000 shape), one bigger than ARC + L2.

All read workloads read one file of random bytes (the backing store). Write workloads get
a fresh sparse file per system, so that no system reads what another one wrote.
"""

from dataclasses import dataclass, field

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True)
class Scale:
    mode: str
    arc_bytes: int
    l2_bytes: int
    log_bytes: int
    runtime_s: int  # one measured fio run
    window_s: int  # one window of a warm-up curve
    warmup_windows: int  # windows from a cold start (larch ARC + L2, nbdkit cache)
    restart_windows: int  # windows after larch's restart
    warm_windows: int  # unreported warm-up runs before a steady measurement
    scan_cap_s: int  # the scan of the scan workload stops at its size or after this
    once_cap_s: int  # the cold sequential read stops at its size or after this
    scaling_runtime_s: int
    scaling_jobs: tuple
    l2_warm_passes: int  # l2-hit: at most this many passes over the working set to warm the L2
    l2_warm_cap_s: int  # l2-hit: and no new pass after this many seconds of warming
    # The slowed backing store: a disk's random read and write.
    read_latency_ms: int = 8
    write_latency_ms: int = 5
    volblocksize: str = "8K"

    @property
    def cache_bytes(self):
        """ARC + L2: the cache size nbdkit's cache filter gets."""
        return self.arc_bytes + self.l2_bytes

    @property
    def in_arc_bytes(self):
        return self.arc_bytes // 2

    @property
    def in_l2_bytes(self):
        """Bigger than the ARC, within ARC + L2."""
        return self.arc_bytes + self.l2_bytes * 3 // 4

    @property
    def l2_hit_bytes(self):
        """Well inside the cache device (half of it) and four times the ARC."""
        return self.l2_bytes // 2

    @property
    def beyond_bytes(self):
        return 2 * self.cache_bytes

    @property
    def scan_bytes(self):
        return 3 * self.cache_bytes // 2

    @property
    def data_bytes(self):
        """The size of the random-data backing file every read workload shares."""
        return max(self.beyond_bytes, self.in_arc_bytes + self.scan_bytes)

    def as_dict(self):
        names = ("cache_bytes", "in_arc_bytes", "in_l2_bytes", "l2_hit_bytes", "beyond_bytes", "scan_bytes",
                 "data_bytes")
        values = dict(self.__dict__)
        values["scaling_jobs"] = list(self.scaling_jobs)
        values.update({name: getattr(self, name) for name in names})
        return values


QUICK = Scale(
    mode="quick",
    arc_bytes=16 * MiB,
    l2_bytes=128 * MiB,
    log_bytes=64 * MiB,
    runtime_s=2,
    window_s=3,
    warmup_windows=6,
    restart_windows=2,
    warm_windows=1,
    scan_cap_s=15,
    once_cap_s=10,
    scaling_runtime_s=3,
    scaling_jobs=(1, 8, 64),
    l2_warm_passes=10,
    l2_warm_cap_s=30,
)

FULL = Scale(
    mode="full",
    arc_bytes=128 * MiB,
    l2_bytes=1 * GiB,
    log_bytes=256 * MiB,
    runtime_s=20,
    window_s=15,
    warmup_windows=10,
    restart_windows=3,
    warm_windows=2,
    scan_cap_s=180,
    once_cap_s=60,
    scaling_runtime_s=10,
    scaling_jobs=(1, 2, 4, 8, 16, 32, 64),
    l2_warm_passes=12,
    l2_warm_cap_s=300,
)

# fio options shared by the random-read workloads: 32 requests in flight, a new random
# sequence every run (so that successive windows do not replay the same offsets) and no
# random map (blocks are drawn with replacement, as a real client does).
RANDOM_8K = {"rw": "randread", "bs": "8k", "numjobs": 4, "iodepth": 8, "randrepeat": 0, "norandommap": None}

# The job shapes at which the hit paths are measured: the 4 jobs x QD8 of the other
# workloads, and one request at a time (1 job x QD1), where the latency of one hit shows.
SHAPES = ((4, 8), (1, 1))

# l2-hit's 8K random reads keep fio's random map (no --norandommap): each job reads its own
# slice of the region, every block once per pass in a new random order.
SLICED_8K = {"rw": "randread", "bs": "8k", "randrepeat": 0}

# l2-hit warms larch's L2 until this share of the ARC misses of a pass are L2 hits.
L2_WARM_TARGET_PCT = 99.0


@dataclass(frozen=True)
class Workload:
    """One workload: its fio job, where it reads, which systems run it and against what.

    `refs` are (role, system) pairs: every table gets a ratio column per ref, and the
    summary has a column for the base ("base": larch without the feature measured), one per
    peer system ("peer": nbdkit's cache filter, as it is or capped) and one for the limit
    ("limit": the protocol or device limit; the first, where a workload has two).
    `headline` names the (system, match) records the summary shows.
    """

    name: str
    title: str
    what: str
    kind: str  # "steady", "warmup", "scan" or "scaling"
    systems: tuple
    refs: tuple
    headline: tuple
    job: dict
    region: str  # the Scale property giving the bytes the job covers
    fresh_backing: bool = False
    prewarm: bool = False
    warm: bool = False  # unreported warm-up runs before the measured one
    once: bool = False  # read the region once, capped at once_cap_s, instead of time_based
    latency: str = "read"  # the latency the tables show: read, write or sync (flush)
    scan: dict = field(default_factory=dict)
    shapes: tuple = ()  # (numjobs, iodepth) pairs, each measured in turn; empty: the job's own
    sliced: bool = False  # each job reads its own 1/numjobs of the region (fio's offset_increment)
    prefill_cache: bool = False  # fill larch's cache device file with random bytes (the device limits read it)
    warm_l2: bool = False  # warm larch's L2 in passes over the region up to L2_WARM_TARGET_PCT

    def region_bytes(self, scale):
        return getattr(scale, self.region)


WORKLOADS = (
    Workload(
        name="arc-8k",
        title="8K random reads, working set in the ARC",
        what="fio 8K random reads (4 jobs x QD8) over half the ARC's size, read twice "
        "beforehand (128K sequential) so that every block is cached: the ARC hit path "
        "against nbdkit's cache filter holding the same blocks, and against the NBD protocol "
        "path's limits: `nbdkit memory` holding the same bytes (written into it first) and "
        "nbdkit serving a tmpfs file (no cache, no delay).",
        kind="steady",
        # nbdkit memory runs right after larch: on a shared machine, the closer in time
        # two runs are, the less the load between them moves their ratio.
        systems=("larch-arc", "nbdkit-memory", "nbdkit-cache", "nbdkit-tmpfs"),
        refs=(("peer", "nbdkit-cache"), ("limit", "nbdkit-memory"), ("limit", "nbdkit-tmpfs")),
        headline=(("larch-arc", ""),),
        job=RANDOM_8K,
        region="in_arc_bytes",
        prewarm=True,
    ),
    Workload(
        name="arc-4k",
        title="4K random reads, working set in the ARC",
        what="fio 4K random reads over half the ARC's size, read twice beforehand (128K "
        "sequential) so that every block is cached, at 1 job x QD1 and at 4 jobs x QD8: "
        "the ARC hit path (each read is half of an 8K block) against `nbdkit memory` "
        "holding the same bytes (written into it first, so every read is of allocated "
        "pages: the NBD protocol path's limit) and nbdkit's cache filter holding the same "
        "blocks.",
        kind="steady",
        systems=("larch-arc", "nbdkit-memory", "nbdkit-cache"),
        refs=(("peer", "nbdkit-cache"), ("limit", "nbdkit-memory")),
        headline=(("larch-arc", "1 job x QD1"), ("larch-arc", "4 jobs x QD8")),
        job={"rw": "randread", "bs": "4k", "randrepeat": 0, "norandommap": None},
        region="in_arc_bytes",
        prewarm=True,
        shapes=SHAPES,
    ),
    Workload(
        name="l2-warmup",
        title="8K random reads bigger than the ARC, within ARC + L2: cold to warm (seed 000)",
        what="fio 8K random reads (4 jobs x QD8) over ARC + 3/4 of L2, from a cold start, "
        "in successive windows: larch with the ARC only (L2ARC off), larch with a cache "
        "device (cold, warm, then warm again after a restart: the persistent L2ARC), "
        "nbdkit's cache filter with ARC + L2 bytes of cache (cold after a restart: its "
        "cache is an unlinked temp file), once as it is and once capped: in a memory cgroup "
        "whose limit is larch's ARC size plus an allowance for nbdkit's own memory, so that "
        "its cache file's page cache gets the DRAM larch's ARC gets and the rest of its "
        "cache is on the disk. The limit is fio reading the cache device file itself "
        "(io_uring, O_DIRECT, same job), which holds random bytes throughout; the second "
        "limit is fio reading that file through qemu-nbd (read-only, O_DIRECT, io_uring): "
        "the device through the NBD path, with no cache.",
        kind="warmup",
        systems=("larch-arc", "larch-l2", "nbdkit-cache", "nbdkit-cache-capped", "fio-device",
                 "qemu-nbd-device"),
        refs=(("base", "larch-arc"), ("peer", "nbdkit-cache"), ("peer", "nbdkit-cache-capped"),
              ("limit", "fio-device"), ("limit", "qemu-nbd-device")),
        headline=(("larch-l2", "warm"), ("larch-l2", "restart")),
        job=RANDOM_8K,
        region="in_l2_bytes",
        prefill_cache=True,
    ),
    Workload(
        name="l2-hit",
        title="8K random reads, working set in the L2: the warm L2 hit path",
        what="fio 8K random reads over half the cache device's size (four times the ARC). "
        "larch is warmed first by passes over the working set that read every block once "
        "each (4 jobs x QD8, each job its own quarter, in a new random order every pass: "
        "fio's random map), the odd passes at most half the ARC's size per second (larch's "
        "L2 feed runs once a second and writes what it finds in the ARC; a block the ARC "
        "evicts before that is never written) and the even ones at full speed, until at "
        "least %g%% of a pass's ARC misses are L2 hits or a pass limit is reached. The "
        "measured runs read the same way at full speed (time-based, every block once per "
        "pass). The ARC still serves the part of the working set it keeps (hits: ARC); the "
        "other reads are L2 hits as far as hits: L2 says, so with it near 100%% fio's p50 is "
        "an L2 hit's latency (slightly below the L2 hits' median, estimated below the "
        "table). The limit is fio reading the cache device file itself "
        "(io_uring, O_DIRECT, the same job over the whole file, which holds random bytes) "
        "at the same jobs x QD; the second limit is the same fio job reading that file "
        "through qemu-nbd (read-only, O_DIRECT, io_uring): what the NBD path to the device "
        "gives with no cache in between, which is all an L2 hit can reach here."
        % L2_WARM_TARGET_PCT,
        kind="steady",
        systems=("larch-l2", "fio-device", "qemu-nbd-device"),
        refs=(("limit", "fio-device"), ("limit", "qemu-nbd-device")),
        headline=(("larch-l2", "4 jobs x QD8"), ("larch-l2", "1 job x QD1")),
        job=SLICED_8K,
        region="l2_hit_bytes",
        shapes=SHAPES,
        sliced=True,
        prefill_cache=True,
        warm_l2=True,
    ),
    Workload(
        name="beyond-l2",
        title="8K random reads bigger than ARC + L2",
        what="fio 8K random reads (4 jobs x QD8) over twice ARC + L2, after one unreported "
        "warm-up run: at most half the blocks can be cached, so most reads wait for the "
        "backing store's 8 ms.",
        kind="steady",
        systems=("larch-l2", "nbdkit-cache"),
        refs=(("peer", "nbdkit-cache"),),
        headline=(("larch-l2", ""),),
        job=RANDOM_8K,
        region="beyond_bytes",
        warm=True,
    ),
    Workload(
        name="zipf",
        title="8K Zipf(0.9) random reads",
        what="fio 8K random reads (4 jobs x QD8) with `random_distribution=zipf:0.9` over "
        "twice ARC + L2, after one unreported warm-up run: a skewed working set whose hot "
        "part fits in the cache.",
        kind="steady",
        systems=("larch-l2", "nbdkit-cache"),
        refs=(("peer", "nbdkit-cache"),),
        headline=(("larch-l2", ""),),
        job=dict(RANDOM_8K, random_distribution="zipf:0.9"),
        region="beyond_bytes",
        warm=True,
    ),
    Workload(
        name="seq-128k",
        title="128K sequential reads, cold",
        what="fio 128K sequential reads (1 job, QD8) from a cold start, once over twice "
        "ARC + L2 or until a time cap: what a cold cache in front of the slow store "
        "delivers to a sequential reader (larch prefetches; nbdkit's cache does not).",
        kind="steady",
        systems=("larch-l2", "nbdkit-cache", "nbdkit-tmpfs"),
        refs=(("peer", "nbdkit-cache"), ("limit", "nbdkit-tmpfs")),
        headline=(("larch-l2", ""),),
        job={"rw": "read", "bs": "128k", "numjobs": 1, "iodepth": 8},
        region="beyond_bytes",
        once=True,
    ),
    Workload(
        name="scan",
        title="Hot set and one large scan",
        what="A hot set of half the ARC is read twice and then by fio 8K random reads "
        "(4 jobs x QD8, before the scan); one 128K sequential scan (QD8) of 1.5 x (ARC + L2) "
        "past the hot set follows (capped in time); then the same random reads of the hot "
        "set again (after the scan). A scan-resistant cache keeps the hot set.",
        kind="scan",
        systems=("larch-l2", "nbdkit-cache"),
        refs=(("peer", "nbdkit-cache"),),
        headline=(("larch-l2", "after scan"),),
        job=RANDOM_8K,
        region="in_arc_bytes",
        prewarm=True,
        scan={"rw": "read", "bs": "128k", "numjobs": 1, "iodepth": 8},
    ),
    Workload(
        name="randwrite-4k",
        title="4K random writes",
        what="fio 4K random writes (4 jobs x QD8, no flushes) over ARC + 3/4 of L2 of a "
        "fresh volume (8K blocks: every write is a read-modify-write of a block, in larch "
        "and in nbdkit's 64K cache blocks alike). larch runs with the ARC only (L2ARC off) "
        "and with a cache device: the cache device must do no harm to writes. The backing "
        "store alone (nbdkit with the same delays, no cache) is the rate a write cache must "
        "at least keep up with (a write to it needs no read first).",
        kind="steady",
        systems=("larch-arc", "larch-l2", "nbdkit-cache", "nbdkit-tmpfs", "nbdkit-backing"),
        refs=(("base", "larch-arc"), ("peer", "nbdkit-cache"), ("limit", "nbdkit-tmpfs"),
              ("limit", "nbdkit-backing")),
        headline=(("larch-l2", ""),),
        job={"rw": "randwrite", "bs": "4k", "numjobs": 4, "iodepth": 8, "randrepeat": 0, "norandommap": None},
        region="in_l2_bytes",
        fresh_backing=True,
        latency="write",
    ),
    Workload(
        name="mix-8k",
        title="8K random 50/50 reads and writes",
        what="fio 8K random reads and writes, half each (`rwmixread=50`, 4 jobs x QD8, no "
        "flushes) over ARC + 3/4 of L2 of a fresh volume. IOPS count both; the latency "
        "shown is the reads'.",
        kind="steady",
        systems=("larch-l2", "nbdkit-cache", "nbdkit-tmpfs"),
        refs=(("peer", "nbdkit-cache"), ("limit", "nbdkit-tmpfs")),
        headline=(("larch-l2", ""),),
        job={"rw": "randrw", "rwmixread": 50, "bs": "8k", "numjobs": 4, "iodepth": 8, "randrepeat": 0, "norandommap": None},
        region="in_l2_bytes",
        fresh_backing=True,
    ),
    Workload(
        name="sync-write",
        title="Sync writes, with and without a log device",
        what="fio 8K random writes with a flush after every write (`fsync=1`, 4 jobs x QD1) "
        "over ARC + 3/4 of L2 of a fresh volume: larch acknowledges a flush once its TXG "
        "is synced (no log device) or once the intent log is on the log device (a file on "
        "the same disk, no injected latency); nbdkit's cache filter writes the dirty blocks "
        "through to the slowed store on every flush. The latency shown is the flushes'.",
        kind="steady",
        systems=("larch-arc", "larch-log", "nbdkit-cache", "nbdkit-tmpfs"),
        refs=(("base", "larch-arc"), ("peer", "nbdkit-cache"), ("limit", "nbdkit-tmpfs")),
        headline=(("larch-log", ""),),
        job={"rw": "randwrite", "bs": "8k", "numjobs": 4, "iodepth": 1, "fsync": 1, "randrepeat": 0, "norandommap": None},
        region="in_l2_bytes",
        fresh_backing=True,
        latency="sync",
    ),
    Workload(
        name="scaling",
        title="Thread scaling, 8K random reads in the ARC",
        what="fio 8K random reads at QD1 from 1 to 64 jobs over half the ARC, read twice "
        "beforehand: how the ARC hit path and its peers scale with concurrent clients on "
        "this machine's cores; the limit is `nbdkit memory` holding the same bytes.",
        kind="scaling",
        systems=("larch-arc", "nbdkit-cache", "nbdkit-memory"),
        refs=(("peer", "nbdkit-cache"), ("limit", "nbdkit-memory")),
        headline=(("larch-arc", "jobs=1"), ("larch-arc", "jobs=64")),
        job={"rw": "randread", "bs": "8k", "iodepth": 1, "randrepeat": 0, "norandommap": None},
        region="in_arc_bytes",
        prewarm=True,
    ),
)


def by_name(names):
    """The workloads named (in their defined order); raises ValueError on an unknown name."""
    known = {w.name: w for w in WORKLOADS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError("unknown workload(s) %s; known: %s" % (", ".join(unknown), ", ".join(known)))
    return [w for w in WORKLOADS if w.name in names]
