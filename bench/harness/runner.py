"""Drives each workload through its systems and collects one record per fio run.

A record holds the exact fio command, fio's summary, larch's hit ratios over the run (from
status.json) and how the report uses it:

- `label`: what the run was ("window 3", "after scan", "jobs=8"; empty for a single run);
- `matches`: keys under which a ratio column finds it as the reference (a record of
  system A with match "warm" is compared with system B's record with match "warm", or with
  B's `default` record when B has none);
- `report`: whether the Markdown table shows it (every record stays in results.json);
- `series`, `x`: where it goes on a curve (warm-up windows, thread scaling).

A system that fails (a missing tool, a server that does not start, a fio error) is recorded
as an error of that workload and the run goes on with the next system.
"""

import os
import shutil
import time

from harness import env, fio, systems, workloads


def hit_deltas(before, after):
    """larch's ARC and L2 hit ratios (percent) between two status.json snapshots.

    The L2 ratio is of ARC misses, as OpenZFS counts it. None without both snapshots.
    """
    if not before or not after:
        return None

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    def pct(hits, total):
        return 100.0 * hits / total if total > 0 else None

    hits, misses = delta("hits"), delta("misses")
    l2_hits, l2_misses = delta("l2_hits"), delta("l2_misses")
    return {
        "arc_hit_pct": pct(hits, hits + misses),
        "l2_hit_pct": pct(l2_hits, l2_hits + l2_misses),
        "arc_size": after.get("size"),
        "l2_size": after.get("l2_size"),
        "l2_rebuild_success": after.get("l2_rebuild_success"),
    }


def shape_label(numjobs, iodepth):
    """"4 jobs x QD8", "1 job x QD1": a run at one job shape."""
    return "%d job%s x QD%d" % (numjobs, "" if numjobs == 1 else "s", iodepth)


def sliced(job, region):
    """`job` with each of its numjobs jobs on its own slice of `region` (offset_increment),
    and the size of one slice: with fio's random map every block is read once per pass."""
    jobs = job.get("numjobs", 1)
    size = region // jobs
    return (dict(job, offset_increment=size) if jobs > 1 else dict(job)), size


def warm_rate_iops(scale, block_bytes, numjobs):
    """The IOPS per job of l2-hit's warm-up passes: half the ARC's size per second in all.

    larch's L2 feed runs once a second (l2arc_feed_secs) and writes what it finds in the
    ARC; a block the ARC evicts before the feed sees it is never written to the L2, so
    reads turning the ARC over faster than that would leave the L2 cold however long they
    ran.
    """
    return max(1, scale.arc_bytes // 2 // block_bytes // numjobs)


def warm_note(passes, l2_hit_pct, target_pct, seconds, pass_limit, cap_s, rate_iops):
    """The report's sentence on how far the L2 warm-up passes got; the ratio either way."""
    if l2_hit_pct is None:
        reached = "no pass had an ARC miss to count (or status.json did not come)"
    else:
        reached = "%.1f%% of the last pass's ARC misses were L2 hits" % l2_hit_pct
    if l2_hit_pct is not None and l2_hit_pct >= target_pct:
        how = "reached the target of %g%%" % target_pct
    else:
        how = "**did not reach the target of %g%%** (at most %d passes or %d s)" % (target_pct, pass_limit, cap_s)
    return ("warmed with %d pass%s over the working set (odd passes at most %d IOPS, so that the L2 feed "
            "sees every block; even ones at full speed) in %.0f s: %s; %s." % (
                passes, "" if passes == 1 else "es", rate_iops, seconds, reached, how))


def interpolate_percentile(percentiles_us, target):
    """The latency at percentile `target` (linear between fio's neighbouring percentiles,
    whose keys are strings such as "50" and "99.9"); None outside their range."""
    points = sorted((float(key), value) for key, value in percentiles_us.items())
    for (p0, v0), (p1, v1) in zip(points, points[1:]):
        if p0 <= target <= p1:
            return v0 if p1 == p0 else v0 + (v1 - v0) * (target - p0) / (p1 - p0)
    return None


def l2_hit_median(summary, arc_hit_pct, l2_hit_pct):
    """(percentile, µs): an estimate of the median latency of a run's L2 hits.

    Of all reads, a share a are ARC hits and b = (1 - a) * L2 ratio are L2 hits; the rest
    wait for the backing store. With ARC hits faster than any L2 hit and L2 hits faster
    than any backing read, the L2 hits' median is fio's percentile a + b/2. None without
    the ratios or the percentiles.
    """
    read = summary.get("read")
    if not read or arc_hit_pct is None or l2_hit_pct is None:
        return None
    arc = arc_hit_pct / 100.0
    l2 = (1.0 - arc) * l2_hit_pct / 100.0
    if l2 <= 0:
        return None
    percentile = 100.0 * (arc + l2 / 2)
    value = interpolate_percentile(read["percentiles_us"], percentile)
    return None if value is None else (percentile, value)


def median_note(records):
    """The report's sentence on the L2 hits' median latency of each measured run."""
    parts = []
    for record in records:
        larch = record.get("larch") or {}
        estimate = l2_hit_median(record["fio"], larch.get("arc_hit_pct"), larch.get("l2_hit_pct"))
        if estimate is None:
            continue
        parts.append("%.3f ms at %s (fio's p%.0f: %.0f%% of the reads were ARC hits, %.1f%% of the others L2 hits)"
                     % (estimate[1] / 1000.0, record["label"], estimate[0], larch["arc_hit_pct"], larch["l2_hit_pct"]))
    if not parts:
        return None
    return ("the median latency of its L2 hits, estimated as fio's percentile below which the ARC hits and "
            "half the L2 hits fall: %s." % "; ".join(parts))


def _bytes_read(record):
    """"N MiB read in T s": how far a run capped in time got."""
    summary = record["fio"]
    return "%d MiB read in %.1f s" % (summary["io_bytes"] // (1024 * 1024), summary["runtime_ms"] / 1000.0)


class Runner:
    def __init__(self, scale, work_dir, larch_bin, data_path, log, raw_dir=None, unavailable=None, tunables=()):
        self.scale = scale
        self.tunables = list(tunables)
        self.work_dir = work_dir
        self.larch_bin = larch_bin
        self.data_path = data_path
        self.log = log
        self.raw_dir = raw_dir
        self.unavailable = dict(unavailable or {})
        self.raw_count = 0
        self.t0 = time.monotonic()
        # The cache device file of this workload's larch-l2, which the device limits read.
        self.device_path = None
        # When the last fio run ended (time.time()): larch's counters from a status.json
        # written after it cover every request before the next run.
        self.last_end = 0.0
        self.notes = []

    # --- one workload ---

    def run(self, workload, names):
        result = {
            "name": workload.name,
            "title": workload.title,
            "what": workload.what,
            "kind": workload.kind,
            "latency": workload.latency,
            "refs": [list(ref) for ref in workload.refs],
            "headline": [list(h) for h in workload.headline],
            "systems": {},
            "records": [],
            "errors": [],
            "notes": [],
            "load_before": env.load_snapshot(),
            "larch_bin_mtime": env.mtime(self.larch_bin),
        }
        started = time.monotonic()
        self.device_path = None
        self.notes = result["notes"]
        for name in [n for n in workload.systems if n in names]:
            if name in self.unavailable:
                result["errors"].append({"system": name, "error": self.unavailable[name]})
                self.log("%s %s: skipped: %s" % (workload.name, name, self.unavailable[name]))
                continue
            self._run_system(workload, name, result)
        # Cache device files and backing copies add up over a full run: free them now.
        for name in result["systems"]:
            shutil.rmtree(self._directory(workload, name), ignore_errors=True)
        result["duration_s"] = round(time.monotonic() - started, 1)
        return result

    def _directory(self, workload, name):
        return os.path.join(self.work_dir, "%s-%s" % (workload.name, name))

    def _run_system(self, workload, name, result):
        directory = self._directory(workload, name)
        os.makedirs(directory, exist_ok=True)
        system = systems.make(
            name,
            self._context(workload, directory),
            directory,
            device_path=self.device_path,
            prefill_cache=workload.prefill_cache,
        )
        handler = {
            "steady": self._steady,
            "warmup": self._warmup,
            "scan": self._scan,
            "scaling": self._scaling,
        }[workload.kind]
        try:
            system.setup()
            handler(workload, system, result["records"])
            if name == "larch-l2":
                self.device_path = system.cache_path
        except (systems.SetupError, fio.FioError, OSError) as error:
            result["errors"].append({"system": name, "error": str(error)})
            self.log("%s %s: FAILED: %s" % (workload.name, name, error))
        finally:
            for note in system.notes():
                self.note(system, note)
            for problem in system.problems():
                result["errors"].append({"system": name, "error": problem})
                self.log("%s %s: %s" % (workload.name, name, problem))
            system.stop()
            system.cleanup()
            result["systems"][name] = {"label": systems.label(name), "commands": system.commands}

    def note(self, system, text):
        self.notes.append({"system": system.name, "note": text})
        self.log("%s: %s" % (system.name, text))

    def _context(self, workload, directory):
        extent = self._extent(workload)
        if workload.fresh_backing:
            backing = os.path.join(directory, "backing.img")
            with open(backing, "wb") as file:
                file.truncate(extent)
        else:
            backing = self.data_path
        return systems.Context(self.larch_bin, self.scale, backing, extent, workload.fresh_backing,
                               tunables=self.tunables)

    def _extent(self, workload):
        """Bytes from offset 0 that the workload touches."""
        if workload.kind == "scan":
            return workload.region_bytes(self.scale) + self.scale.scan_bytes
        return workload.region_bytes(self.scale)

    # --- fio runs ---

    def _fio(self, workload, system, job, size, timing, fresh=False, **fields):
        """One fio run as a record. `fresh`: larch's counters from status.json files
        written after the previous run and after this one (waits up to a second each)."""
        options = {"name": workload.name}
        options.update(system.target())
        options.update(job)
        options["size"] = size
        options.update(timing)
        options["group_reporting"] = None
        options["output-format"] = "json"
        argv = fio.command(options)
        seconds = int(timing.get("runtime", 60))
        before = system.stats(since=self.last_end if fresh else None)
        start = time.monotonic()
        summary, raw = fio.run(argv, timeout_s=seconds + 300)
        self.last_end = time.time()
        after = system.stats(since=self.last_end if fresh else None)
        self._keep_raw(workload, system, raw)
        record = {
            "system": system.name,
            "label": "",
            "matches": [],
            "default": False,
            "report": False,
            "command": argv,
            "fio": summary,
            "larch": hit_deltas(before, after),
            "wall_s": round(time.monotonic() - start, 2),
        }
        record.update(fields)
        self.log(
            "[%4.0f s] %s %s %s: %.0f IOPS"
            % (time.monotonic() - self.t0, workload.name, system.name, record["label"] or "run", summary["iops"])
        )
        return record

    def _keep_raw(self, workload, system, raw):
        if not self.raw_dir:
            return
        self.raw_count += 1
        path = os.path.join(self.raw_dir, "%03d-%s-%s.json" % (self.raw_count, workload.name, system.name))
        with open(path, "w", encoding="utf-8") as file:
            file.write(raw)

    def _timed(self, seconds):
        return {"time_based": None, "runtime": seconds}

    def _prewarm(self, workload, system, records):
        """Read the region twice, sequentially: the second read makes ARC blocks MFU."""
        job = {"rw": "read", "bs": "128k", "numjobs": 1, "iodepth": 8, "loops": 2}
        records.append(
            self._fio(workload, system, job, workload.region_bytes(self.scale), {"runtime": 900}, label="prewarm")
        )

    # --- the four kinds of workload ---

    def _steady(self, workload, system, records):
        scale = self.scale
        system.start()
        if workload.prewarm:
            self._prewarm(workload, system, records)
        if workload.warm_l2 and system.name == "larch-l2":
            self._warm_l2(workload, system, records)
        if workload.shapes:
            self._shapes(workload, system, records)
            return
        if workload.warm:
            for i in range(scale.warm_windows):
                records.append(
                    self._fio(workload, system, workload.job, workload.region_bytes(scale), self._timed(scale.runtime_s),
                              label="warm-up run %d" % (i + 1))
                )
        timing = {"runtime": scale.once_cap_s} if workload.once else self._timed(scale.runtime_s)
        record = self._fio(workload, system, workload.job, workload.region_bytes(scale), timing,
                           matches=[""], default=True, report=True)
        if workload.once:
            record["label"] = _bytes_read(record)
        records.append(record)

    def _region(self, workload, system):
        """The bytes a system's runs cover: the device limits read the whole cache device file."""
        return self.scale.l2_bytes if system.name in systems.DEVICE_LIMITS else workload.region_bytes(self.scale)

    def _shaped_job(self, workload, system, numjobs, iodepth):
        """The workload's job at one shape, and the size each job covers."""
        job = dict(workload.job, numjobs=numjobs, iodepth=iodepth)
        if workload.sliced:
            return sliced(job, self._region(workload, system))
        return job, self._region(workload, system)

    def _shapes(self, workload, system, records):
        """One reported run per job shape; the first shape is the default reference."""
        measured = []
        for i, (numjobs, iodepth) in enumerate(workload.shapes):
            label = shape_label(numjobs, iodepth)
            job, size = self._shaped_job(workload, system, numjobs, iodepth)
            measured.append(
                self._fio(workload, system, job, size, self._timed(self.scale.runtime_s), fresh=workload.warm_l2,
                          label=label, matches=[label], default=i == 0, report=True)
            )
        records.extend(measured)
        if workload.warm_l2 and system.name == "larch-l2":
            note = median_note(measured)
            if note:
                self.note(system, note)

    def _warm_l2(self, workload, system, records):
        """Passes over the region, each reading every block once (4 jobs x QD8, sliced, fio's
        random map), until the L2 hit ratio of a pass's ARC misses reaches the target or
        the pass limit or time cap is reached. Odd passes fill the L2 (at a rate its feed
        keeps up with), even ones check it at full speed. Every pass is kept (unreported)."""
        scale = self.scale
        rate = warm_rate_iops(scale, 8192, 4)
        fill, size = sliced(dict(workload.job, numjobs=4, iodepth=8, rate_iops=rate), workload.region_bytes(scale))
        check, _ = sliced(dict(workload.job, numjobs=4, iodepth=8), workload.region_bytes(scale))
        started = time.monotonic()
        passes, pct = 0, None
        while passes < scale.l2_warm_passes and time.monotonic() - started < scale.l2_warm_cap_s:
            passes += 1
            job = fill if passes % 2 == 1 else check
            record = self._fio(workload, system, job, size, {"runtime": scale.l2_warm_cap_s}, fresh=True,
                               label="warm-up pass %d" % passes)
            records.append(record)
            pct = (record["larch"] or {}).get("l2_hit_pct")
            if pct is not None and pct >= workloads.L2_WARM_TARGET_PCT:
                break
        self.note(system, warm_note(passes, pct, workloads.L2_WARM_TARGET_PCT, time.monotonic() - started,
                                    scale.l2_warm_passes, scale.l2_warm_cap_s, 4 * rate))

    def _warmup(self, workload, system, records):
        scale = self.scale
        if system.name in systems.DEVICE_LIMITS:
            system.start()
            records.append(
                self._fio(workload, system, workload.job, scale.l2_bytes, self._timed(scale.runtime_s),
                          matches=[""], default=True, report=True)
            )
            return
        series = systems.label(system.name)
        system.start()
        if system.name == "larch-arc":
            # Without a cache device there is nothing to warm beyond the ARC: a short curve,
            # its last window the reference.
            windows = max(2, scale.warmup_windows // 3)
            self._windows(workload, system, records, windows, series, first=None, last=["warm"])
            return
        self._windows(workload, system, records, scale.warmup_windows, series, first=["cold"], last=["warm"])
        if system.name in ("nbdkit-cache", "nbdkit-cache-capped"):
            # Its cache is an unlinked temp file: after a restart it starts cold again.
            records[-scale.warmup_windows]["matches"].append("restart")
        if system.name == "larch-l2":
            system.restart()
            self._windows(workload, system, records, scale.restart_windows, series + ", after restart",
                          first=["restart"], last=None, label="after restart, window")

    def _windows(self, workload, system, records, count, series, first, last, label="window"):
        """`count` successive windows. The first is reported with the matches `first`, the
        last with `last` (and as the system's default reference); None: not reported."""
        scale = self.scale
        start = time.monotonic()
        for i in range(count):
            record = self._fio(workload, system, workload.job, workload.region_bytes(scale), self._timed(scale.window_s),
                               label="%s %d" % (label, i + 1), series=series)
            record["x"] = round(time.monotonic() - start, 1)
            if i == 0 and first is not None:
                record["matches"] += first
                record["report"] = True
            if i == count - 1 and last is not None:
                record["matches"] += last
                record["report"] = True
                record["default"] = True
            records.append(record)

    def _scan(self, workload, system, records):
        scale = self.scale
        hot = workload.region_bytes(scale)
        system.start()
        self._prewarm(workload, system, records)
        records.append(
            self._fio(workload, system, workload.job, hot, self._timed(scale.runtime_s), label="warm-up run")
        )
        records.append(
            self._fio(workload, system, workload.job, hot, self._timed(scale.runtime_s),
                      label="before scan", matches=["before scan"], report=True)
        )
        scan = dict(workload.scan, offset=hot)
        record = self._fio(workload, system, scan, scale.scan_bytes, {"runtime": scale.scan_cap_s},
                           label="scan", matches=["scan"], report=True)
        record["label"] = "scan, " + _bytes_read(record)
        records.append(record)
        records.append(
            self._fio(workload, system, workload.job, hot, self._timed(scale.runtime_s),
                      label="after scan", matches=["after scan"], default=True, report=True)
        )

    def _scaling(self, workload, system, records):
        scale = self.scale
        system.start()
        self._prewarm(workload, system, records)
        jobs = list(scale.scaling_jobs)
        for n in jobs:
            # fresh: the hit ratios of this point only (else the first point's counted the
            # prewarm's misses, written to status.json after the point began).
            record = self._fio(workload, system, dict(workload.job, numjobs=n), workload.region_bytes(scale),
                               self._timed(scale.scaling_runtime_s), fresh=True, label="jobs=%d" % n,
                               matches=["jobs=%d" % n], report=True, default=n == jobs[-1],
                               series=systems.label(system.name))
            record["x"] = n
            records.append(record)
