"""fio command lines and the parser of fio's JSON output.

fio's `--output-format=json` is not always pure JSON: the nbd engine prints
"fio: connected to NBD server" once per job before the document, and fio may print
warnings before or after it. `extract_json` finds the document among those lines.

A summary keeps what the report needs from one fio run (aggregated over its jobs with
`--group_reporting`): per direction the IOPS, bandwidth, bytes and completion-latency
percentiles in microseconds, and for jobs with `fsync=1` the latency of the syncs.
"""

import json
import subprocess


class FioError(Exception):
    """fio failed, or its output held no usable JSON document."""


def extract_json(text):
    """The first JSON object in `text` that starts at the beginning of a line.

    Lines before it (engine messages, warnings) and anything after it are ignored.
    """
    decoder = json.JSONDecoder()
    position = 0
    while True:
        start = text.find("{", position)
        if start < 0:
            raise FioError("no JSON document in fio output: %r" % text[:200])
        if start == 0 or text[start - 1] == "\n":
            try:
                document, _ = decoder.raw_decode(text, start)
                return document
            except json.JSONDecodeError:
                pass
        position = start + 1


def percentile_key(percentile):
    """The key of a percentile in a summary: "50", "99.9" (strings, so that a summary
    reads the same after a round trip through results.json)."""
    return "%g" % float(percentile)


def _percentiles_us(latency):
    """fio's {"50.000000": ns, ...} as {"50": us, ...}; empty when fio kept none."""
    table = (latency or {}).get("percentile") or {}
    return {percentile_key(key): value / 1000.0 for key, value in table.items()}


def _direction(stats):
    """The summary of one direction (read or write) of a job, or None when it did no I/O."""
    if not stats or not stats.get("total_ios"):
        return None
    clat = stats.get("clat_ns") or {}
    return {
        "iops": float(stats["iops"]),
        "bw_bytes": float(stats["bw_bytes"]),
        "io_bytes": int(stats["io_bytes"]),
        "ios": int(stats["total_ios"]),
        "mean_us": float(clat.get("mean", 0.0)) / 1000.0,
        "max_us": float(clat.get("max", 0.0)) / 1000.0,
        "percentiles_us": _percentiles_us(clat),
    }


def _sync(job):
    """The latency of a job's syncs (fio fsync=N), or None when it issued none."""
    sync = job.get("sync") or {}
    latency = sync.get("lat_ns") or {}
    if not sync.get("total_ios"):
        return None
    return {
        "ios": int(sync["total_ios"]),
        "mean_us": float(latency.get("mean", 0.0)) / 1000.0,
        "percentiles_us": _percentiles_us(latency),
    }


def summarize(document):
    """The summary of a fio JSON document with one (group-reported) job."""
    jobs = document.get("jobs")
    if not jobs:
        raise FioError("fio JSON has no jobs")
    if len(jobs) != 1:
        raise FioError("expected one job (use --group_reporting), got %d" % len(jobs))
    job = jobs[0]
    read = _direction(job.get("read"))
    write = _direction(job.get("write"))
    return {
        "fio_version": document.get("fio version"),
        "error": int(job.get("error", 0)),
        # Each direction's runtime is the wall time of the group; job_runtime sums the jobs.
        "runtime_ms": max(int((job.get(d) or {}).get("runtime", 0)) for d in ("read", "write")),
        "iops": sum(d["iops"] for d in (read, write) if d),
        "bw_bytes": sum(d["bw_bytes"] for d in (read, write) if d),
        "io_bytes": sum(d["io_bytes"] for d in (read, write) if d),
        "read": read,
        "write": write,
        "sync": _sync(job),
    }


def parse(text):
    """fio output (text) -> summary."""
    return summarize(extract_json(text))


def latency(summary, direction, percentile):
    """A latency percentile in microseconds of `direction` ("read", "write" or "sync").

    None when the run has no such direction or fio did not report that percentile.
    """
    stats = summary.get(direction)
    if not stats:
        return None
    return stats["percentiles_us"].get(percentile_key(percentile))


def command(options):
    """fio's argv for an ordered mapping of options (name first; values None are flags)."""
    argv = ["fio"]
    for key, value in options.items():
        argv.append("--%s" % key if value is None else "--%s=%s" % (key, value))
    return argv


def run(argv, timeout_s):
    """Run fio and return (summary, raw output). Raises FioError when fio fails."""
    try:
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as error:
        raise FioError("fio did not finish within %d s" % timeout_s) from error
    if done.returncode != 0:
        raise FioError("fio exited with %d: %s" % (done.returncode, done.stderr.strip()[-500:]))
    summary = parse(done.stdout)
    if summary["error"]:
        raise FioError("fio job error %d: %s" % (summary["error"], done.stderr.strip()[-500:]))
    return summary, done.stdout
