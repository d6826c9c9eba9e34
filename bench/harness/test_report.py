"""Ratios, Markdown tables and the marked section of BENCHMARKS.md, on made-up results."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import report  # noqa: E402


def summary(iops, p50_us=100.0, p99_us=1000.0, direction="read"):
    stats = {"iops": iops, "bw_bytes": iops * 8192, "io_bytes": 0, "ios": 1, "mean_us": p50_us,
             "max_us": p99_us, "percentiles_us": {"50": p50_us, "90": p99_us / 2, "99": p99_us, "99.9": p99_us * 2}}
    out = {"iops": iops, "bw_bytes": iops * 8192, "io_bytes": 0, "read": None, "write": None, "sync": None}
    out[direction] = stats
    return out


def record(system, iops, label="", matches=("",), default=True, report_it=True, **extra):
    out = {"system": system, "label": label, "matches": list(matches), "default": default, "report": report_it,
           "command": ["fio", "--name=w", "--uri=nbd+unix:///?socket=/tmp/larch-bench.abc/w/nbd.sock"],
           "fio": summary(iops), "larch": None}
    out.update(extra)
    return out


def workload(records, refs=(("peer", "nbdkit-cache"), ("limit", "nbdkit-tmpfs")), headline=(("larch-arc", ""),),
             name="arc-8k", kind="steady"):
    return {
        "name": name, "title": "8K random reads", "what": "What it measures.", "kind": kind, "latency": "read",
        "refs": [list(r) for r in refs], "headline": [list(h) for h in headline], "records": records,
        "errors": [], "systems": {"larch-arc": {"label": "larch, ARC only", "commands": [
            ["/repo/target/release/larch", "serve", "--state-dir", "/tmp/larch-bench.abc/w/pool"]]}},
        "load_before": {"loadavg": [0.5, 0.5, 0.5]},
    }


def results(workloads, load=(0.3, 0.4)):
    return {
        "command": "bench/run --quick", "started": 1795348000.0, "duration_s": 250.0,
        "machine": {"nproc": 2, "cpu_model": "Test CPU", "kernel": "6.18", "mem_total_bytes": 24 << 30},
        "commit": {"short": "abc1234", "subject": "A commit", "dirty": False},
        "tools": {"fio": "fio-3.33", "nbdkit": "nbdkit 1.32.5"},
        "scale": {"mode": "quick", "read_latency_ms": 8, "write_latency_ms": 5, "arc_bytes": 16 << 20,
                  "l2_bytes": 128 << 20, "log_bytes": 64 << 20, "volblocksize": "8K", "cache_bytes": 144 << 20},
        "load_start": {"loadavg": [load[0], 0, 0], "uptime": "12:00 up 1:00, load average: %.2f" % load[0]},
        "load_end": {"loadavg": [load[1], 0, 0], "uptime": "12:04 up 1:04, load average: %.2f" % load[1]},
        "paths": {"work_dir": "/tmp/larch-bench.abc", "larch_bin": "/repo/target/release/larch",
                  "larch_bin_display": "target/release/larch"},
        "workloads": workloads,
        "interrupted": False,
    }


class Numbers(unittest.TestCase):
    def test_ratio(self):
        self.assertAlmostEqual(report.ratio(300.0, 100.0), 3.0)
        self.assertIsNone(report.ratio(300.0, 0.0))
        self.assertIsNone(report.ratio(None, 100.0))
        self.assertIsNone(report.ratio(300.0, None))

    def test_formats(self):
        self.assertEqual(report.fmt_ratio(0.766), "0.77")
        self.assertEqual(report.fmt_ratio(None), "–")
        self.assertEqual(report.fmt_ratio(146 / 107962), "0.001")
        self.assertEqual(report.fmt_ratio(178.43), "178")
        self.assertEqual(report.fmt_ratio(35.344), "35.34")
        self.assertEqual(report.fmt_int(12345.6), "12,346")
        self.assertEqual(report.fmt_ms(43.776), "0.044")
        self.assertEqual(report.fmt_ms(8290.0), "8.29")
        self.assertEqual(report.fmt_ms(19270.0), "19.3")
        self.assertEqual(report.fmt_ms(228140.0), "228")
        self.assertEqual(report.fmt_bytes(16 << 20), "16 MiB")
        self.assertEqual(report.fmt_bytes(5 << 29), "2.5 GiB")
        self.assertEqual(report.fmt_duration(251), "4 min 11 s")
        self.assertEqual(report.fmt_duration(13), "13 s")


class Tables(unittest.TestCase):
    def test_markdown_table(self):
        text = report.markdown_table(["a", "b"], [["x|y", 2]], ["l", "r"])
        self.assertEqual(text, "| a | b |\n|---|---:|\n| x\\|y | 2 |\n")

    def test_markdown_table_rejects_ragged_rows(self):
        with self.assertRaises(ValueError):
            report.markdown_table(["a", "b"], [["x"]], ["l", "r"])
        with self.assertRaises(ValueError):
            report.markdown_table(["a", "b"], [], ["l"])

    def test_find_ref_prefers_the_same_match_then_the_default(self):
        records = [
            record("nbdkit-cache", 100, label="window 1", matches=["cold", "restart"], default=False),
            record("nbdkit-cache", 900, label="window 6", matches=["warm"], default=True),
        ]
        self.assertEqual(report.find_ref(records, "nbdkit-cache", ["restart"])["fio"]["iops"], 100)
        self.assertEqual(report.find_ref(records, "nbdkit-cache", ["warm"])["fio"]["iops"], 900)
        self.assertEqual(report.find_ref(records, "nbdkit-cache", ["jobs=4"])["fio"]["iops"], 900)
        self.assertIsNone(report.find_ref(records, "larch-l2", ["warm"]))

    def test_workload_table_has_a_ratio_column_per_ref(self):
        w = workload([record("larch-arc", 300), record("nbdkit-cache", 100), record("nbdkit-tmpfs", 600),
                      record("larch-arc", 5, label="prewarm", report_it=False, default=False, matches=[])])
        lines = report.workload_table(w).splitlines()
        self.assertEqual(lines[0], "| system | IOPS | MiB/s | p50 ms | p99 ms | hits: ARC / L2 "
                                   "| vs nbdkit cache filter | vs nbdkit file on tmpfs |")
        self.assertEqual(len(lines), 2 + 3)  # header, alignment, the three reported records
        self.assertTrue(lines[2].startswith("| larch, ARC only | 300 | 2.3 | 0.100 | 1.00 | – | 3.00 | 0.50 |"))
        self.assertTrue(lines[3].endswith("| 1.00 | 0.17 |"))
        self.assertTrue(lines[4].endswith("| 6.00 | 1.00 |"))

    def test_run_column_only_when_records_have_labels(self):
        w = workload([record("larch-arc", 300, label="jobs=1", matches=["jobs=1"]),
                      record("nbdkit-cache", 100, label="jobs=1", matches=["jobs=1"])])
        self.assertIn("| system | run | IOPS |", report.workload_table(w))

    def test_larch_hit_ratios(self):
        r = record("larch-l2", 300, larch={"arc_hit_pct": 25.0, "l2_hit_pct": 71.4, "l2_size": 1 << 20})
        self.assertEqual(report._hits(r), "25% / 71%")
        r = record("larch-arc", 300, larch={"arc_hit_pct": 99.6, "l2_hit_pct": None, "l2_size": 0})
        self.assertEqual(report._hits(r), "100%")

    def test_summary_puts_ratios_under_their_roles(self):
        w = workload([record("larch-arc", 300), record("nbdkit-cache", 100), record("nbdkit-tmpfs", 600)])
        rows = report.summary_table(results([w])).splitlines()
        self.assertEqual(rows[2], "| arc-8k | larch, ARC only |  | 300 | 1.00 | – | 3.00 | 0.50 (tmpfs) |")

    def test_a_missing_reference_gives_a_dash(self):
        w = workload([record("larch-arc", 300)])
        self.assertIn("| – | – |", report.workload_table(w))


class NewColumns(unittest.TestCase):
    def test_summary_shows_the_first_limit_and_a_column_per_peer(self):
        arc = workload([record("larch-arc", 300), record("nbdkit-cache", 100), record("nbdkit-memory", 400),
                        record("nbdkit-tmpfs", 600)],
                       refs=(("peer", "nbdkit-cache"), ("limit", "nbdkit-memory"), ("limit", "nbdkit-tmpfs")))
        warm = workload([record("larch-l2", 300, label="window 6", matches=["warm"]),
                         record("nbdkit-cache", 600, label="window 6", matches=["warm"]),
                         record("nbdkit-cache-capped", 50, label="window 6", matches=["warm"]),
                         record("fio-device", 1000)],
                        refs=(("peer", "nbdkit-cache"), ("peer", "nbdkit-cache-capped"), ("limit", "fio-device")),
                        headline=(("larch-l2", "warm"),), name="l2-warmup", kind="warmup")
        rows = report.summary_table(results([arc, warm])).splitlines()
        self.assertEqual(rows[0], "| workload | larch | run | IOPS | p99 ms | vs larch without it | vs nbdkit cache "
                                  "| vs nbdkit cache, capped | vs limit |")
        self.assertEqual(rows[2], "| arc-8k | larch, ARC only |  | 300 | 1.00 | – | 3.00 | – | 0.75 (memory) |")
        self.assertEqual(rows[3], "| l2-warmup | larch, ARC + L2 | window 6 | 300 | 1.00 | – | 0.50 | 6.00 "
                                  "| 0.30 (device) |")
        header = report.workload_table(arc).splitlines()[0]
        self.assertTrue(header.endswith("| vs nbdkit cache filter | vs nbdkit memory | vs nbdkit file on tmpfs |"))

    def test_no_capped_column_without_the_capped_peer(self):
        w = workload([record("larch-arc", 300), record("nbdkit-cache", 100)])
        self.assertNotIn("capped", report.summary_table(results([w])))

    def test_notes_and_errors_follow_the_table(self):
        w = workload([record("larch-arc", 300)])
        w["notes"] = [{"system": "larch-l2", "note": "warmed with 3 passes."}]
        w["errors"] = [{"system": "nbdkit-cache-capped", "error": "not run: cannot make the memory cgroup"}]
        section = report.render_section(results([w]), "bench/results/x")
        self.assertIn("- larch, ARC + L2: warmed with 3 passes.\n"
                      "- **nbdkit cache filter, capped**: not run: cannot make the memory cgroup\n", section)

    def test_a_shell_script_argument_is_single_quoted(self):
        self.assertEqual(report.shell_quote('echo $$ > "$0" && exec "$@"'), '\'echo $$ > "$0" && exec "$@"\'')
        self.assertEqual(report.shell_quote("it's $1"), "'it'\\''s $1'")
        self.assertEqual(report.shell_quote("--filename=$WORK/a b"), '"--filename=$WORK/a b"')


class Tunables(unittest.TestCase):
    def test_the_setup_names_tunables_set_for_the_run(self):
        r = results([])
        self.assertIn("tunables at their defaults. ", report.setup_text(r))
        r["tunables_set"] = ["nbd_idle_yield=0", "l2arc_write_max=64M"]
        self.assertIn("tunables at their defaults except `nbd_idle_yield=0`, `l2arc_write_max=64M` "
                      "(`bench/run --set`). ", report.setup_text(r))


class Binary(unittest.TestCase):
    START = {"size": 1, "mtime": 1795348000.0, "sha256": "a" * 64}

    def test_the_build_is_named(self):
        r = results([dict(workload([]), larch_bin_mtime=self.START["mtime"])])
        r["larch_bin_start"] = r["larch_bin_end"] = self.START
        self.assertEqual(report.binary_note(r), "larch binary: modified 2026-11-22 11:46:40 UTC, SHA-256 `aaaaaaaaaaaa`.")
        self.assertIn(report.binary_note(r), report.render_section(r, "x"))
        self.assertEqual(report.binary_note(results([])), "")

    def test_a_rebuild_during_the_run_is_called_out(self):
        first = dict(workload([]), larch_bin_mtime=self.START["mtime"])
        later = dict(workload([], name="scaling"), larch_bin_mtime=self.START["mtime"] + 60)
        r = results([first, later])
        r["larch_bin_start"] = self.START
        r["larch_bin_end"] = {"size": 1, "mtime": self.START["mtime"] + 60, "sha256": "b" * 64}
        note = report.binary_note(r)
        self.assertIn("**It was rebuilt during the run** (modified 2026-11-22 11:47:40 UTC at the end, "
                      "SHA-256 `bbbbbbbbbbbb`): `scaling` started with a newer build", note)


class Commands(unittest.TestCase):
    def test_temporary_paths_become_variables_and_stay_expandable(self):
        paths = results([])["paths"]
        argv = ["fio", "--uri=nbd+unix:///?socket=/tmp/larch-bench.abc/w/nbd.sock", "a b"]
        self.assertEqual(report.command_line(argv, paths), 'fio "--uri=nbd+unix:///?socket=$WORK/w/nbd.sock" "a b"')
        argv = ["/repo/target/release/larch", "serve", "--state-dir", "/tmp/larch-bench.abc/p"]
        self.assertEqual(report.command_line(argv, paths), "target/release/larch serve --state-dir $WORK/p")
        self.assertEqual(report.command_line(["# /dev/shm/larch-bench.x1_y/data.img: copy"], paths),
                         "# $SHM/data.img: copy")


class Section(unittest.TestCase):
    def section(self, marker="x"):
        return "%s\nbody %s\n%s\n" % (report.BEGIN, marker, report.END)

    def test_appended_at_the_end_when_absent(self):
        text = "# larch benchmarks\n\n## Other\n\ntext\n"
        new = report.replace_section(text, self.section())
        self.assertTrue(new.startswith(text))
        self.assertTrue(new.endswith(self.section()))

    def test_replaces_only_between_the_markers(self):
        text = "# head\n\n" + self.section("old") + "\n## after\n\nkept\n"
        new = report.replace_section(text, self.section("new"))
        self.assertEqual(new, "# head\n\n" + self.section("new") + "\n## after\n\nkept\n")

    def test_idempotent(self):
        text = "# larch benchmarks\n\nsomething\n"
        once = report.replace_section(text, self.section())
        self.assertEqual(report.replace_section(once, self.section()), once)

    def test_broken_markers_are_refused(self):
        for text in ("a\n%s\nb\n" % report.BEGIN, "a\n%s\nb\n" % report.END,
                     self.section() + self.section(), "%s\n%s\n" % (report.END, report.BEGIN)):
            with self.assertRaises(ValueError):
                report.replace_section(text, self.section())
        with self.assertRaises(ValueError):
            report.replace_section("text\n", "no markers\n")

    def test_update_file(self):
        import tempfile

        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "BENCHMARKS.md")
            with open(path, "w", encoding="utf-8") as file:
                file.write("# larch benchmarks\n\nhand-written\n")
            self.assertTrue(report.update_file(path, self.section()))
            self.assertFalse(report.update_file(path, self.section()))
            with open(path, encoding="utf-8") as file:
                self.assertTrue(file.read().startswith("# larch benchmarks\n\nhand-written\n\n" + report.BEGIN))

    def test_rendered_section_round_trips(self):
        w = workload([record("larch-arc", 300), record("nbdkit-cache", 100), record("nbdkit-tmpfs", 600)])
        w["plots"] = [{"file": "arc-8k-latency.svg", "title": "arc-8k: latency"}]
        section = report.render_section(results([w]), "bench/results/x")
        self.assertTrue(section.startswith(report.BEGIN))
        self.assertTrue(section.rstrip().endswith(report.END))
        self.assertIn("![arc-8k: latency](bench/results/x/arc-8k-latency.svg)", section)
        self.assertIn("target/release/larch serve --state-dir $WORK/w/pool", section)
        self.assertNotIn("/tmp/larch-bench.abc", section)
        text = report.replace_section("# larch benchmarks\n", section)
        self.assertEqual(report.replace_section(text, section), text)
        # --report-only renders from results.json: the same section.
        again = json.loads(json.dumps(results([w])))
        self.assertEqual(report.render_section(again, "bench/results/x"), section)
        self.assertIn("| larch, ARC only | 300 | 2.3 | 0.100 | 1.00 |", section)


class Provenance(unittest.TestCase):
    def test_local_changes_are_named(self):
        self.assertEqual(report._local_changes({"dirty": False}), "")
        self.assertEqual(report._local_changes({"dirty": True, "dirty_files": ["a.rs"]}), " with local changes to `a.rs`")
        many = {"dirty": True, "dirty_files": ["a", "b", "c", "d", "e"]}
        self.assertEqual(report._local_changes(many), " with local changes to `a`, `b`, `c` and 2 more files")


class LoadNote(unittest.TestCase):
    def test_quiet(self):
        note = report.load_note(results([workload([])], load=(0.2, 0.6)))
        self.assertTrue(note.startswith("Load average (1 min) 0.2 to 0.6 on 2 cores"))
        self.assertNotIn("busy", note)

    def test_busy_machine_is_called_out(self):
        self.assertIn("was busy at times", report.load_note(results([workload([])], load=(3.5, 4.0))))


if __name__ == "__main__":
    unittest.main()
