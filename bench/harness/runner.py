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

from harness import env, fio, systems


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


def _bytes_read(record):
    """"N MiB read in T s": how far a run capped in time got."""
    summary = record["fio"]
    return "%d MiB read in %.1f s" % (summary["io_bytes"] // (1024 * 1024), summary["runtime_ms"] / 1000.0)


class Runner:
    def __init__(self, scale, work_dir, larch_bin, data_path, log, raw_dir=None, unavailable=None):
        self.scale = scale
        self.work_dir = work_dir
        self.larch_bin = larch_bin
        self.data_path = data_path
        self.log = log
        self.raw_dir = raw_dir
        self.unavailable = dict(unavailable or {})
        self.raw_count = 0
        self.t0 = time.monotonic()
        # The cache device file of this workload's larch-l2, which fio-device reads.
        self.device_path = None

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
            "load_before": env.load_snapshot(),
        }
        started = time.monotonic()
        self.device_path = None
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
            prefill_cache=workload.kind == "warmup",
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
            for problem in system.problems():
                result["errors"].append({"system": name, "error": problem})
                self.log("%s %s: %s" % (workload.name, name, problem))
            system.stop()
            system.cleanup()
            result["systems"][name] = {"label": systems.label(name), "commands": system.commands}

    def _context(self, workload, directory):
        extent = self._extent(workload)
        if workload.fresh_backing:
            backing = os.path.join(directory, "backing.img")
            with open(backing, "wb") as file:
                file.truncate(extent)
        else:
            backing = self.data_path
        return systems.Context(self.larch_bin, self.scale, backing, extent, workload.fresh_backing)

    def _extent(self, workload):
        """Bytes from offset 0 that the workload touches."""
        if workload.kind == "scan":
            return workload.region_bytes(self.scale) + self.scale.scan_bytes
        return workload.region_bytes(self.scale)

    # --- fio runs ---

    def _fio(self, workload, system, job, size, timing, **fields):
        options = {"name": workload.name}
        options.update(system.target())
        options.update(job)
        options["size"] = size
        options.update(timing)
        options["group_reporting"] = None
        options["output-format"] = "json"
        argv = fio.command(options)
        seconds = int(timing.get("runtime", 60))
        before = system.stats()
        start = time.monotonic()
        summary, raw = fio.run(argv, timeout_s=seconds + 300)
        after = system.stats()
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

    def _warmup(self, workload, system, records):
        scale = self.scale
        if system.name == "fio-device":
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
        if system.name == "nbdkit-cache":
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
            record = self._fio(workload, system, dict(workload.job, numjobs=n), workload.region_bytes(scale),
                               self._timed(scale.scaling_runtime_s), label="jobs=%d" % n, matches=["jobs=%d" % n],
                               report=True, default=n == jobs[-1], series=systems.label(system.name))
            record["x"] = n
            records.append(record)
