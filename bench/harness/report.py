"""Results (the run's JSON) -> Markdown: a summary, one table per workload with ratios
against systems measured in the same run, the exact commands, and the marked section of
BENCHMARKS.md that `bench/run` owns.

The section lies between BEGIN and END; `replace_section` swaps only what is between them
(appending the section at the end the first time), so running it twice gives the same file
and nothing outside the markers changes.
"""

import re
from datetime import datetime, timezone

from harness import fio, systems

BEGIN = "<!-- bench/run begin -->"
END = "<!-- bench/run end -->"

MiB = 1024 * 1024
ROLE_HEADINGS = {"base": "vs larch without it", "peer": "vs nbdkit cache", "limit": "vs limit"}
# The summary has a column per peer: nbdkit-cache always, the others when a workload has them.
PEER_HEADINGS = {"nbdkit-cache": "vs nbdkit cache", "nbdkit-cache-capped": "vs nbdkit cache, capped"}
LIMIT_NAMES = {"nbdkit-memory": "memory", "nbdkit-tmpfs": "tmpfs", "nbdkit-backing": "backing store", "fio-device": "device",
               "qemu-nbd-device": "device via qemu-nbd"}


# --- numbers ---


def ratio(value, base):
    """value / base, or None when either is missing or the base is not positive."""
    if value is None or base is None or base <= 0:
        return None
    return value / base


def fmt_ratio(value):
    """Two decimals; three below 0.1 (so that 0.001 is not shown as 0.00), none from 100."""
    if value is None:
        return "–"
    if value < 0.095:
        return "%.3f" % value
    return "%.0f" % value if value >= 99.5 else "%.2f" % value


def fmt_int(value):
    return "–" if value is None else "{:,}".format(int(round(value)))


def fmt_ms(us):
    """Milliseconds with three significant digits or so."""
    if us is None:
        return "–"
    ms = us / 1000.0
    if ms < 1:
        return "%.3f" % ms
    if ms < 10:
        return "%.2f" % ms
    if ms < 100:
        return "%.1f" % ms
    return "%.0f" % ms


def fmt_pct(value):
    return "–" if value is None else "%.0f%%" % value


def fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%g %s" % (round(n / size, 2), unit)
    return "%d B" % n


def fmt_duration(seconds):
    seconds = int(round(seconds))
    return "%d min %02d s" % (seconds // 60, seconds % 60) if seconds >= 60 else "%d s" % seconds


# --- tables ---


def markdown_table(headers, rows, align):
    """A GitHub Markdown table; `align` is "l" or "r" per column. `|` in cells is escaped."""
    if len(headers) != len(align):
        raise ValueError("%d headers but %d alignments" % (len(headers), len(align)))

    def cell(value):
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
    for row in rows:
        if len(row) != len(headers):
            raise ValueError("row has %d cells, table %d columns: %r" % (len(row), len(headers), row))
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def find_ref(records, system, matches):
    """The record of `system` sharing one of `matches`, else that system's default record."""
    own = [r for r in records if r["system"] == system]
    for record in own:
        if set(record.get("matches", ())) & set(matches):
            return record
    for record in own:
        if record.get("default"):
            return record
    return None


def ref_ratios(workload, record):
    """IOPS ratio of `record` against each ref of its workload (None where it is missing)."""
    out = []
    for _role, system in workload["refs"]:
        ref = find_ref(workload["records"], system, record.get("matches", ()))
        out.append(ratio(record["fio"]["iops"], ref["fio"]["iops"] if ref else None))
    return out


def _latency(workload, record, percentile):
    return fio.latency(record["fio"], workload["latency"], percentile)


def _hits(record):
    larch = record.get("larch")
    if not larch:
        return "–"
    arc = fmt_pct(larch.get("arc_hit_pct"))
    if larch.get("l2_size"):
        return "%s / %s" % (arc, fmt_pct(larch.get("l2_hit_pct")))
    return arc


def workload_table(workload):
    """The table of one workload: its reported records, with one ratio column per ref."""
    records = [r for r in workload["records"] if r.get("report")]
    with_label = any(r["label"] for r in records)
    headers = ["system"] + (["run"] if with_label else [])
    headers += ["IOPS", "MiB/s", "p50 ms", "p99 ms", "hits: ARC / L2"]
    headers += ["vs %s" % systems.label(system) for _role, system in workload["refs"]]
    rows = []
    for record in records:
        row = [systems.label(record["system"])] + ([record["label"]] if with_label else [])
        row += [
            fmt_int(record["fio"]["iops"]),
            "%.1f" % (record["fio"]["bw_bytes"] / MiB),
            fmt_ms(_latency(workload, record, 50)),
            fmt_ms(_latency(workload, record, 99)),
            _hits(record),
        ]
        row += [fmt_ratio(r) for r in ref_ratios(workload, record)]
        rows.append(row)
    align = ["l"] * (2 if with_label else 1) + ["r"] * (len(headers) - (2 if with_label else 1))
    return markdown_table(headers, rows, align)


def summary_columns(results):
    """The summary's ratio columns as (role, system): the base, one per peer system
    (nbdkit-cache always, the others when a workload has them), the limit. system is None
    where the column takes the first ref of its role (a workload may have two limits; the
    summary shows the first, its table both)."""
    peers = ["nbdkit-cache"]
    for workload in results["workloads"]:
        peers += [system for role, system in workload["refs"] if role == "peer" and system not in peers]
    return [("base", None)] + [("peer", p) for p in peers] + [("limit", None)]


def column_heading(role, system):
    if role == "peer":
        return PEER_HEADINGS.get(system, "vs %s" % systems.label(system))
    return ROLE_HEADINGS[role]


def column_ratio(workload, ratios, role, system):
    """(system, ratio) of the summary column (role, system) in one row; (None, None) when
    the workload has no such ref."""
    for (ref_role, ref_system), value in zip(workload["refs"], ratios):
        if ref_role == role and (system is None or ref_system == system):
            return ref_system, value
    return None, None


def summary_table(results):
    """One row per headline record of every workload, with a ratio per column."""
    columns = summary_columns(results)
    headers = ["workload", "larch", "run", "IOPS", "p99 ms"] + [column_heading(*c) for c in columns]
    rows = []
    for workload in results["workloads"]:
        for system, match in workload["headline"]:
            record = find_ref([r for r in workload["records"] if r.get("report")], system, [match])
            if record is None:
                continue
            ratios = ref_ratios(workload, record)
            row = [
                workload["name"],
                systems.label(system),
                record["label"] or "",
                fmt_int(record["fio"]["iops"]),
                fmt_ms(_latency(workload, record, 99)),
            ]
            for role, column_system in columns:
                ref_system, value = column_ratio(workload, ratios, role, column_system)
                cell = fmt_ratio(value)
                if role == "limit" and value is not None:
                    cell += " (%s)" % LIMIT_NAMES.get(ref_system, ref_system)
                row.append(cell)
            rows.append(row)
    return markdown_table(headers, rows, ["l", "l", "l", "r", "r"] + ["r"] * len(columns))


# --- commands ---


def _display_path(text, paths):
    if paths.get("larch_bin"):
        text = text.replace(paths["larch_bin"], paths.get("larch_bin_display", "larch"))
    if paths.get("work_dir"):
        text = text.replace(paths["work_dir"], "$WORK")
    return re.sub(r"/dev/shm/larch-bench\.[A-Za-z0-9_]+", "$SHM", text)


def shell_quote(arg):
    """Quote for a POSIX shell, leaving $WORK and $SHM to expand (double quotes); an
    argument with any other `$` (a shell script's own `$$`, `$0`) in single quotes."""
    if re.search(r"\$(?!WORK\b|SHM\b)", arg):
        return "'%s'" % arg.replace("'", "'\\''")
    if re.fullmatch(r"[\w@%+=:,./$-]+", arg):
        return arg
    return '"%s"' % re.sub(r'(["\\`])', r"\\\1", arg)


def command_line(argv, paths):
    """A command as a shell line, with the run's temporary directories as $WORK and $SHM."""
    if len(argv) == 1 and argv[0].startswith("#"):
        return _display_path(argv[0], paths)
    return " ".join(shell_quote(_display_path(arg, paths)) for arg in argv)


def workload_commands(workload, paths):
    """Every command of a workload, grouped by system, in the order they ran (results.json
    keeps `systems` with sorted keys: the records give the order)."""
    order = [r["system"] for r in workload["records"]]
    ranked = sorted(workload["systems"].items(),
                    key=lambda item: order.index(item[0]) if item[0] in order else len(order))
    lines = []
    for system, info in ranked:
        lines.append("# %s" % systems.label(system))
        lines += [command_line(c, paths) for c in info["commands"]]
        lines += [command_line(r["command"], paths) for r in workload["records"] if r["system"] == system]
    return "\n".join(lines)


# --- the section ---


def _local_changes(commit):
    """" with local changes to A, B" when tracked files differed from the commit."""
    if not commit.get("dirty"):
        return ""
    files = commit.get("dirty_files") or []
    if not files:
        return " with local changes"
    shown = ", ".join("`%s`" % f for f in files[:3])
    return " with local changes to %s%s" % (shown, " and %d more files" % (len(files) - 3) if len(files) > 3 else "")


def _when(timestamp):
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def load_note(results):
    """One sentence on the machine's load; says so when it was busy (shared machine)."""
    snapshots = [results["load_start"], results.get("load_end") or {}]
    snapshots += [w.get("load_before") or {} for w in results["workloads"]]
    loads = [s["loadavg"][0] for s in snapshots if s.get("loadavg")]
    nproc = results["machine"].get("nproc") or 1
    if not loads:
        return "The load average was not recorded."
    text = "Load average (1 min) %.1f to %.1f on %d cores during the run" % (min(loads), max(loads), nproc)
    if max(loads) > nproc * 0.75:
        text += (
            ": the machine was busy at times (the load average counts this run's own fio jobs, "
            "up to 64 in the scaling workload, as well as whatever else ran on this shared "
            "machine), so absolute figures are noisy, and so are ratios between runs a minute "
            "or more apart"
        )
    return text + "."


def binary_note(results):
    """Which larch build ran, and a warning when it was rebuilt during the run ("" for
    results without the binary's identity)."""
    start, end = results.get("larch_bin_start"), results.get("larch_bin_end")
    if not start:
        return ""
    text = "larch binary: modified %s, SHA-256 `%s`." % (_when_s(start["mtime"]), start["sha256"][:12])
    later = [w["name"] for w in results["workloads"] if w.get("larch_bin_mtime") not in (None, start["mtime"])]
    if later or (end and end["sha256"] != start["sha256"]):
        text += " **It was rebuilt during the run**"
        if end and end["sha256"] != start["sha256"]:
            text += " (modified %s at the end, SHA-256 `%s`)" % (_when_s(end["mtime"]), end["sha256"][:12])
        text += (": %s started with a newer build than the first workload; figures of different builds "
                 "are not comparable." % (", ".join("`%s`" % n for n in later) if later else "no workload"))
    return text


def _when_s(timestamp):
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def tunables_text(assignments):
    """What the setup says of larch's tunables (bench/run --set)."""
    if not assignments:
        return "tunables at their defaults"
    return "tunables at their defaults except %s (`bench/run --set`)" % ", ".join(
        "`%s`" % a for a in assignments)


def setup_text(results):
    scale = results["scale"]
    capped = ""
    if results.get("nbdkit_allowance_bytes"):
        capped = (
            "; its capped variant runs in a memory cgroup (v1) whose limit, which counts the "
            "page cache, is the ARC's size plus %s for nbdkit itself"
            % fmt_bytes(results["nbdkit_allowance_bytes"])
        )
    return (
        "Setup: the backing store is a file on the local disk whose every read waits %d ms "
        "and every write %d ms (larch's `--read-latency-ms`/`--write-latency-ms`; nbdkit's "
        "delay filter `rdelay`/`wdelay` under its cache filter). larch: `zfs_arc_max` %s, "
        "cache device %s (a file on the same disk, O_DIRECT), log device %s, volblocksize %s, "
        "%s. nbdkit's cache filter: `cache-on-read=true`, "
        "`cache-max-size` %s (ARC + L2), its default 64K blocks, its cache file in the same "
        "directory as larch's cache device (through the page cache: with this machine's free "
        "memory, a DRAM cache)%s. `nbdkit memory` (`allocator=malloc`, one flat array: the "
        "fastest of its allocators) gets the workload's bytes written into it before the "
        "first read. fio %s with the `nbd` "
        "engine over Unix sockets. Ratios are of IOPS against a system measured in the same "
        "run; latencies are fio's completion latencies (of the flushes for sync writes). "
        "hits: ARC / L2 are larch's hit ratios during the run (the L2's of ARC misses, from "
        "status.json, refreshed every second)."
        % (
            scale["read_latency_ms"],
            scale["write_latency_ms"],
            fmt_bytes(scale["arc_bytes"]),
            fmt_bytes(scale["l2_bytes"]),
            fmt_bytes(scale["log_bytes"]),
            scale["volblocksize"],
            tunables_text(results.get("tunables_set") or []),
            fmt_bytes(scale["cache_bytes"]),
            capped,
            (results["tools"].get("fio") or "?").replace("fio-", ""),
        )
    )


def render_section(results, link_prefix):
    """The whole marked section. `link_prefix` is the results directory as seen from
    BENCHMARKS.md, for the plots' links."""
    machine, commit = results["machine"], results["commit"]
    paths = results.get("paths", {})
    out = [BEGIN, "## bench/run: larch against nbdkit and the device limits", ""]
    out.append(
        "Generated by `%s` (%s mode) on %s in %s, larch commit `%s`%s (\"%s\"), on a %d-core \"%s\" "
        "machine (kernel %s, %s RAM), %s, nbdkit %s, %s. %s Results: `%s/results.json`."
        % (
            results["command"],
            results["scale"]["mode"],
            _when(results["started"]),
            fmt_duration(results["duration_s"]),
            commit.get("short"),
            _local_changes(commit),
            commit.get("subject") or "",
            machine.get("nproc") or 0,
            machine.get("cpu_model"),
            machine.get("kernel"),
            fmt_bytes(machine.get("mem_total_bytes") or 0),
            results["tools"].get("fio"),
            (results["tools"].get("nbdkit") or "missing").replace("nbdkit ", ""),
            ((results["tools"].get("qemu-nbd") or "qemu-nbd missing").splitlines() or ["?"])[0],
            load_note(results),
            link_prefix,
        )
    )
    out += ["", "`uptime` at the start: `%s`; at the end: `%s`." % (
        results["load_start"].get("uptime"), (results.get("load_end") or {}).get("uptime")), ""]
    if binary_note(results):
        out += [binary_note(results), ""]
    out += [setup_text(results), ""]
    if results.get("interrupted"):
        out += ["**The run was interrupted; only the workloads shown ran.**", ""]
    out += ["### Summary", "", summary_table(results)]
    out.append(
        "vs larch without it: against larch with the ARC only (L2ARC off, or no log device). "
        "vs nbdkit cache: against nbdkit's cache filter, its cache file in the page cache "
        "without a bound"
        + ("; capped: the same in a memory cgroup that gives it the ARC's DRAM (page cache "
           "included) plus nbdkit's own memory, the rest of its cache on the disk"
           if ("peer", "nbdkit-cache-capped") in summary_columns(results) else "")
        + ". vs limit: against `nbdkit memory` holding the same bytes (the NBD protocol path "
        "for ARC hits), nbdkit serving a tmpfs file (the protocol path), or fio reading the "
        "cache device file (io_uring, O_DIRECT, same jobs x QD); the L2 workloads' tables "
        "also have fio reading that file through qemu-nbd (O_DIRECT, io_uring), the device "
        "through the NBD path. Each workload below has the full table."
    )
    out.append("")
    for i, workload in enumerate(results["workloads"], 1):
        out += ["### %d. %s (`%s`)" % (i, workload["title"], workload["name"]), "", workload["what"], ""]
        out.append(workload_table(workload))
        for note in workload.get("notes") or []:
            out.append("- %s: %s" % (systems.label(note["system"]), note["note"]))
        for error in workload["errors"]:
            out.append("- **%s**: %s" % (systems.label(error["system"]), error["error"]))
        if workload["errors"] or workload.get("notes"):
            out.append("")
        for plot in workload.get("plots", []):
            out += ["![%s](%s/%s)" % (plot["title"], link_prefix, plot["file"]), ""]
        out += [
            "<details><summary>Commands (%s)</summary>" % workload["name"],
            "",
            "```sh",
            workload_commands(workload, paths),
            "```",
            "",
            "</details>",
            "",
        ]
    out.append(
        "`$WORK` is the run's temporary directory (removed at the end), `$SHM` a directory in "
        "/dev/shm; `%s/results.json` has every fio run (including unreported warm-up runs) "
        "with its exact command and fio's percentiles." % link_prefix
    )
    out.append(END)
    return "\n".join(out) + "\n"


def replace_section(text, section):
    """`text` with the marked section replaced by `section` (or appended at the end).

    `section` must itself start with BEGIN and end with END. Raises ValueError when `text`
    has one marker without the other, or more than one section.
    """
    if not section.startswith(BEGIN) or not section.rstrip("\n").endswith(END):
        raise ValueError("section must start with %r and end with %r" % (BEGIN, END))
    begins, ends = text.count(BEGIN), text.count(END)
    if begins == 0 and ends == 0:
        return text.rstrip("\n") + "\n\n" + section
    if begins != 1 or ends != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError("BENCHMARKS.md has %d begin and %d end markers, out of order or repeated" % (begins, ends))
    head = text[: text.index(BEGIN)]
    tail = text[text.index(END) + len(END):]
    if tail.startswith("\n"):
        tail = tail[1:]
    return head + section.rstrip("\n") + "\n" + tail


def update_file(path, section):
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        text = "# larch benchmarks\n"
    new = replace_section(text, section)
    with open(path, "w", encoding="utf-8") as file:
        file.write(new)
    return new != text
