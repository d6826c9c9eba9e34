"""The command line of `bench/run`: build, run the workloads, write results and reports."""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

from harness import env, plots, report, runner, systems, workloads

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="bench/run",
        description="Run larch's benchmarks (issue 7) against nbdkit and the device limits; "
        "write results JSON, SVG plots and the bench/run section of BENCHMARKS.md.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and short runs (under 5 minutes)")
    parser.add_argument("--out", help="results directory (default bench/results/<date>-<commit>)")
    parser.add_argument("--only", help="comma-separated workloads (default all): %s"
                        % ",".join(w.name for w in workloads.WORKLOADS))
    parser.add_argument("--systems", help="comma-separated systems (default all): %s" % ",".join(systems.LABELS))
    parser.add_argument("--no-build", action="store_true", help="do not run cargo build --release --bin larch")
    parser.add_argument("--no-benchmarks-md", action="store_true", help="leave BENCHMARKS.md alone")
    parser.add_argument("--benchmarks-md", default=os.path.join(REPO, "BENCHMARKS.md"), help=argparse.SUPPRESS)
    parser.add_argument("--keep-raw", action="store_true", help="also keep fio's raw JSON output in OUT/raw")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="tunables",
                        help="a larch tunable for every larch pool of the run (`larch set`; repeatable), "
                        "e.g. --set nbd_idle_yield=0; the report names it")
    parser.add_argument("--report-only", metavar="RESULTS_JSON",
                        help="rewrite plots and reports from an earlier run's results.json")
    args = parser.parse_args(argv)
    for assignment in args.tunables:
        name, sep, value = assignment.partition("=")
        if not sep or not name or not value:
            parser.error("--set takes NAME=VALUE, not %r" % assignment)
    args.workloads = workloads.by_name(args.only.split(",")) if args.only else list(workloads.WORKLOADS)
    args.system_names = args.systems.split(",") if args.systems else list(systems.LABELS)
    unknown = [s for s in args.system_names if s not in systems.LABELS]
    if unknown:
        parser.error("unknown system(s) %s" % ", ".join(unknown))
    return args


def log(message):
    print(message, file=sys.stderr, flush=True)


def _interrupt(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def write_outputs(results, out_dir, benchmarks_md, update_md):
    """Plots, results.json, report.md and (unless told not to) BENCHMARKS.md's section."""
    os.makedirs(out_dir, exist_ok=True)
    for workload in results["workloads"]:
        workload["plots"] = []
    for workload, name, title, text in plots.make(results):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as file:
            file.write(text)
        workload["plots"].append({"file": name, "title": title})
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as file:
        json.dump(results, file, indent=1, sort_keys=True)
        file.write("\n")
    md_dir = os.path.dirname(os.path.abspath(benchmarks_md))
    link_prefix = os.path.relpath(os.path.abspath(out_dir), md_dir)
    section = report.render_section(results, link_prefix)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as file:
        file.write(section)
    if update_md:
        report.update_file(benchmarks_md, section)
        log("updated the bench/run section of %s" % benchmarks_md)
    log("results in %s" % out_dir)


def build():
    log("cargo build --release --bin larch")
    done = subprocess.run(["cargo", "build", "--release", "--bin", "larch"], cwd=REPO)
    if done.returncode != 0:
        sys.exit("cargo build failed (%d)" % done.returncode)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.report_only:
        with open(args.report_only, encoding="utf-8") as file:
            results = json.load(file)
        out_dir = args.out or os.path.dirname(os.path.abspath(args.report_only))
        write_outputs(results, out_dir, args.benchmarks_md, not args.no_benchmarks_md)
        return 0

    scale = workloads.QUICK if args.quick else workloads.FULL
    if not args.no_build:
        build()
    larch_bin = os.path.join(REPO, "target", "release", "larch")
    if not os.access(larch_bin, os.X_OK):
        sys.exit("no release binary at %s (run without --no-build)" % larch_bin)
    still_missing = env.install_missing_tools(log)
    if "fio" in still_missing:
        sys.exit("fio is missing and could not be installed (apt-get install fio)")
    unavailable = {}
    reason = env.nbdkit_missing()
    if reason:
        log("nbdkit systems will not run: %s" % reason)
        unavailable = {name: reason for name in systems.NBDKIT_SYSTEMS}
    reason = env.qemu_nbd_missing()
    if reason:
        log("qemu-nbd-device will not run: %s" % reason)
        unavailable["qemu-nbd-device"] = reason

    commit = env.commit(REPO)
    started = time.time()
    date = datetime.fromtimestamp(started, timezone.utc).strftime("%Y-%m-%d")
    out_dir = os.path.abspath(args.out or os.path.join(REPO, "bench", "results", "%s-%s" % (date, commit["short"])))
    results = {
        "schema": 1,
        "command": " ".join(["bench/run", *(sys.argv[1:] if argv is None else argv)]),
        "started": started,
        "machine": env.machine(),
        "load_start": env.load_snapshot(),
        "commit": commit,
        "tools": env.tool_versions(larch_bin),
        "larch_bin_start": env.file_identity(larch_bin),
        "scale": scale.as_dict(),
        "systems_unavailable": unavailable,
        "nbdkit_allowance_bytes": systems.NBDKIT_ALLOWANCE_BYTES,
        "tunables_set": list(args.tunables),
        "workloads": [],
        "interrupted": False,
    }
    log("bench/run (%s): %d workloads, commit %s, load %s"
        % (scale.mode, len(args.workloads), commit["short"], results["load_start"]["loadavg"]))

    signal.signal(signal.SIGTERM, _interrupt)
    work_dir = tempfile.mkdtemp(prefix="larch-bench.", dir="/tmp")
    results["paths"] = {
        "work_dir": work_dir,
        "larch_bin": larch_bin,
        "larch_bin_display": os.path.relpath(larch_bin, REPO),
    }
    raw_dir = os.path.join(out_dir, "raw") if args.keep_raw else None
    if raw_dir:
        os.makedirs(raw_dir, exist_ok=True)
    try:
        data_path = os.path.join(work_dir, "data.img")
        log("writing %s of random data to %s" % (report.fmt_bytes(scale.data_bytes), data_path))
        systems.fill_random(data_path, scale.data_bytes, seed=1)
        run = runner.Runner(scale, work_dir, larch_bin, data_path, log, raw_dir, unavailable, args.tunables)
        for workload in args.workloads:
            results["workloads"].append(run.run(workload, args.system_names))
    except KeyboardInterrupt:
        results["interrupted"] = True
        log("interrupted: stopping the servers")
    finally:
        systems.stop_all()
        shutil.rmtree(work_dir, ignore_errors=True)
    results["load_end"] = env.load_snapshot()
    results["larch_bin_end"] = env.file_identity(larch_bin)
    results["duration_s"] = round(time.time() - started, 1)
    update_md = not args.no_benchmarks_md and not results["interrupted"]
    write_outputs(results, out_dir, args.benchmarks_md, update_md)
    log("took %s" % report.fmt_duration(results["duration_s"]))
    return 130 if results["interrupted"] else 0
