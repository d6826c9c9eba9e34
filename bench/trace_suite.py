"""The traces the policy benches run (bench/policy_referee.py, bench/l2_admission.py), and
the little they need to read them: names, the suite's list, and a bzip2 trace turned into
one larch reads.

The suite (under the traces root, ../shared/traces from the repository root):
arc/OLTP.lis.zst, arc/P3.lis.zst, cloudphysics/cloudPhysicsIO.vscsi, every
lirs/*.trace.gz, the MSR Cambridge, SYSTOR'17 and Tencent CBS samples in format-samples/
(the Tencent one is bzip2, which larch does not read: it is decompressed into the work
directory as a .csv), and the synthetic workloads of bench/gen_workloads.py, generated
into the work directory.
"""

import bz2
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_workloads  # noqa: E402  (bench/gen_workloads.py, next to this module)


def _quiet(_message):
    pass


def trace_name(relative):
    """'lirs/cs.trace.gz' -> 'lirs/cs': the path under the traces root without its
    format and compression suffixes."""
    name = relative
    while True:
        stem, ext = os.path.splitext(name)
        if ext not in (".zst", ".gz", ".bz2", ".lis", ".trace", ".csv", ".vscsi", ".txt"):
            return name
        name = stem


def suite(traces_root, work, log=_quiet):
    """[(name, source path)] of every trace in the suite, generated workloads included
    (their files are written under work/gen if missing)."""
    relative = ["arc/OLTP.lis.zst", "arc/P3.lis.zst", "cloudphysics/cloudPhysicsIO.vscsi"]
    lirs = sorted(glob.glob(os.path.join(traces_root, "lirs", "*.trace.gz")))
    if not lirs:
        log(f"no lirs/*.trace.gz under {traces_root}")
    relative += [os.path.relpath(p, traces_root) for p in lirs]
    relative += [
        "format-samples/msr-cambridge1-sample.csv",
        "format-samples/systor17-traces-sample.csv.gz",
        "format-samples/tencent-cbs-cloud_storage-sample.bz2",
    ]
    out = [(trace_name(r), os.path.join(traces_root, r)) for r in relative]
    generated = gen_workloads.generate(os.path.join(work, "gen"), log=log)
    out += [("gen/" + trace_name(os.path.basename(p)), p) for p in generated]
    return out


def readable_source(name, source, work, log=_quiet):
    """The file to give larch: bzip2 traces (which larch does not read) are decompressed
    into the work directory first, under a .csv name."""
    if not source.endswith(".bz2"):
        return source
    plain = os.path.join(work, "src", os.path.basename(source)[: -len(".bz2")] + ".csv")
    if not os.path.exists(plain) or os.path.getmtime(plain) < os.path.getmtime(source):
        os.makedirs(os.path.dirname(plain), exist_ok=True)
        with bz2.open(source, "rb") as inp, open(plain + ".tmp", "wb") as out:
            shutil.copyfileobj(inp, out)
        os.replace(plain + ".tmp", plain)
        log(f"{name}: decompressed {source} into {plain}")
    return plain


def file_key(path):
    """What identifies a file's contents for a cache: its path, size and mtime."""
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
