"""The workload definitions are consistent with the sizes and the systems they name, and
larch's hit ratios come out of two status.json snapshots."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import runner, systems, workloads  # noqa: E402


class Scales(unittest.TestCase):
    def test_regions_sit_where_their_names_say(self):
        for scale in (workloads.QUICK, workloads.FULL):
            with self.subTest(scale.mode):
                self.assertLess(scale.in_arc_bytes, scale.arc_bytes)
                self.assertLess(scale.arc_bytes, scale.in_l2_bytes)
                self.assertLess(scale.in_l2_bytes, scale.cache_bytes)
                self.assertGreater(scale.beyond_bytes, scale.cache_bytes)
                self.assertGreater(scale.scan_bytes, scale.cache_bytes)
                # A cache device under 8x the ARC faulted in larch's feed (batch limit of a
                # quarter of the device); keep the sizes clear of it.
                self.assertGreaterEqual(scale.l2_bytes, 8 * scale.arc_bytes)

    def test_every_read_workload_fits_in_the_data_file(self):
        for scale in (workloads.QUICK, workloads.FULL):
            for w in workloads.WORKLOADS:
                extent = w.region_bytes(scale) + (scale.scan_bytes if w.kind == "scan" else 0)
                self.assertLessEqual(extent, scale.data_bytes, (scale.mode, w.name))

    def test_scaling_goes_from_1_to_64_jobs(self):
        for scale in (workloads.QUICK, workloads.FULL):
            self.assertEqual((scale.scaling_jobs[0], scale.scaling_jobs[-1]), (1, 64))

    def test_as_dict_has_the_derived_sizes(self):
        values = workloads.QUICK.as_dict()
        self.assertEqual(values["cache_bytes"], workloads.QUICK.arc_bytes + workloads.QUICK.l2_bytes)
        self.assertEqual(values["mode"], "quick")


class Definitions(unittest.TestCase):
    def test_refs_and_headlines_name_systems_of_the_workload(self):
        roles = {"base", "peer", "limit"}
        for w in workloads.WORKLOADS:
            with self.subTest(w.name):
                for system in w.systems:
                    self.assertIn(system, systems.LABELS)
                for role, system in w.refs:
                    self.assertIn(role, roles)
                    self.assertIn(system, w.systems)
                for system, _match in w.headline:
                    self.assertIn(system, w.systems)
                self.assertIn(w.kind, ("steady", "warmup", "scan", "scaling"))
                self.assertIn(w.latency, ("read", "write", "sync"))

    def test_names_are_unique_and_selectable(self):
        names = [w.name for w in workloads.WORKLOADS]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual([w.name for w in workloads.by_name(["scan", "arc-8k"])], ["arc-8k", "scan"])
        with self.assertRaises(ValueError):
            workloads.by_name(["nope"])

    def test_the_issue_asks_for_zipf_0_9(self):
        zipf = workloads.by_name(["zipf"])[0]
        self.assertEqual(zipf.job["random_distribution"], "zipf:0.9")


class NewWorkloads(unittest.TestCase):
    def test_l2_hit_sits_in_the_l2_and_beyond_the_arc(self):
        for scale in (workloads.QUICK, workloads.FULL):
            self.assertGreaterEqual(scale.l2_hit_bytes, 4 * scale.arc_bytes)
            self.assertLessEqual(scale.l2_hit_bytes, scale.l2_bytes // 2)
            self.assertGreater(scale.l2_warm_passes, 1)

    def test_l2_hit_keeps_the_random_map_and_warms_larch(self):
        l2_hit = workloads.by_name(["l2-hit"])[0]
        self.assertNotIn("norandommap", l2_hit.job)
        self.assertTrue(l2_hit.sliced and l2_hit.warm_l2 and l2_hit.prefill_cache)
        self.assertEqual(l2_hit.shapes, ((4, 8), (1, 1)))
        self.assertEqual([s for role, s in l2_hit.refs if role == "limit"], ["fio-device", "qemu-nbd-device"])
        self.assertEqual(l2_hit.systems.index("larch-l2") + 1, l2_hit.systems.index("fio-device"))

    def test_the_device_limits_run_after_larch_l2_whose_cache_file_they_read(self):
        for w in workloads.WORKLOADS:
            for name in systems.DEVICE_LIMITS:
                if name in w.systems:
                    self.assertIn("larch-l2", w.systems, w.name)
                    self.assertLess(w.systems.index("larch-l2"), w.systems.index(name), w.name)
                    self.assertTrue(w.prefill_cache, w.name)

    def test_arc_hit_workloads_have_nbdkit_memory_as_their_first_limit(self):
        for name in ("arc-8k", "arc-4k", "scaling"):
            w = workloads.by_name([name])[0]
            self.assertEqual([s for role, s in w.refs if role == "limit"][0], "nbdkit-memory", name)
        self.assertEqual(workloads.by_name(["arc-4k"])[0].job["bs"], "4k")

    def test_the_cache_device_must_do_no_harm_to_writes(self):
        w = workloads.by_name(["randwrite-4k"])[0]
        self.assertIn(("base", "larch-arc"), w.refs)
        self.assertEqual(w.headline, (("larch-l2", ""),))

    def test_seed_000_runs_both_nbdkit_cache_variants(self):
        w = workloads.by_name(["l2-warmup"])[0]
        self.assertIn(("peer", "nbdkit-cache"), w.refs)
        self.assertIn(("peer", "nbdkit-cache-capped"), w.refs)


class Shapes(unittest.TestCase):
    def test_labels(self):
        self.assertEqual(runner.shape_label(1, 1), "1 job x QD1")
        self.assertEqual(runner.shape_label(4, 8), "4 jobs x QD8")

    def test_sliced_gives_each_job_its_own_part(self):
        job, size = runner.sliced({"rw": "randread", "numjobs": 4, "iodepth": 8}, 64 << 20)
        self.assertEqual(size, 16 << 20)
        self.assertEqual(job["offset_increment"], 16 << 20)
        self.assertEqual(job["iodepth"], 8)
        job, size = runner.sliced({"rw": "randread", "numjobs": 1}, 64 << 20)
        self.assertEqual(size, 64 << 20)
        self.assertNotIn("offset_increment", job)


class WarmNote(unittest.TestCase):
    def test_reached(self):
        note = runner.warm_note(4, 99.4, 99.0, 12.3, 10, 40, 1024)
        self.assertEqual(note, "warmed with 4 passes over the working set (odd passes at most 1024 IOPS, so that "
                               "the L2 feed sees every block; even ones at full speed) in 12 s: 99.4% of the last "
                               "pass's ARC misses were L2 hits; reached the target of 99%.")

    def test_not_reached_says_so_with_the_ratio(self):
        note = runner.warm_note(10, 97.25, 99.0, 40.2, 10, 40, 1024)
        self.assertIn("97.2% of the last pass's ARC misses were L2 hits", note)
        self.assertIn("**did not reach the target of 99%** (at most 10 passes or 40 s)", note)
        self.assertIn("no pass had an ARC miss", runner.warm_note(1, None, 99.0, 1.0, 10, 40, 1024))

    def test_warm_rate_turns_the_arc_over_at_most_every_two_seconds(self):
        self.assertEqual(runner.warm_rate_iops(workloads.QUICK, 8192, 4), 256)  # 16 MiB ARC: 1024 IOPS in all
        self.assertEqual(runner.warm_rate_iops(workloads.FULL, 8192, 4), 2048)


class L2HitMedian(unittest.TestCase):
    PERCENTILES = {"10": 10.0, "20": 20.0, "50": 100.0, "60": 120.0, "70": 140.0, "99": 8000.0}

    def test_interpolates_between_fio_percentiles(self):
        self.assertAlmostEqual(runner.interpolate_percentile(self.PERCENTILES, 65), 130.0)
        self.assertAlmostEqual(runner.interpolate_percentile(self.PERCENTILES, 50), 100.0)
        self.assertIsNone(runner.interpolate_percentile(self.PERCENTILES, 5))
        self.assertIsNone(runner.interpolate_percentile(self.PERCENTILES, 99.5))

    def test_the_median_of_l2_hits_sits_above_the_arc_hits(self):
        summary = {"read": {"percentiles_us": self.PERCENTILES}}
        # 20% ARC hits, all the rest L2 hits: their median is at p60.
        percentile, value = runner.l2_hit_median(summary, 20.0, 100.0)
        self.assertAlmostEqual(percentile, 60.0)
        self.assertAlmostEqual(value, 120.0)
        # 20% ARC hits, half the rest L2 hits (40% of reads): p40 of the reads.
        self.assertAlmostEqual(runner.l2_hit_median(summary, 20.0, 50.0)[0], 40.0)
        self.assertIsNone(runner.l2_hit_median(summary, None, 99.0))
        self.assertIsNone(runner.l2_hit_median(summary, 20.0, 0.0))
        self.assertIsNone(runner.l2_hit_median({"read": None}, 20.0, 99.0))

    def test_note(self):
        record = {"label": "1 job x QD1", "fio": {"read": {"percentiles_us": self.PERCENTILES}},
                  "larch": {"arc_hit_pct": 20.0, "l2_hit_pct": 100.0}}
        note = runner.median_note([record, dict(record, larch=None)])
        self.assertTrue(note.endswith(": 0.120 ms at 1 job x QD1 (fio's p60: 20% of the reads were ARC hits, "
                                      "100.0% of the others L2 hits)."))
        self.assertIsNone(runner.median_note([dict(record, larch=None)]))


class HitDeltas(unittest.TestCase):
    def test_ratios_over_the_run(self):
        before = {"hits": 100, "misses": 100, "l2_hits": 10, "l2_misses": 90, "size": 1, "l2_size": 0}
        after = {"hits": 400, "misses": 200, "l2_hits": 85, "l2_misses": 115, "size": 2, "l2_size": 4096}
        deltas = runner.hit_deltas(before, after)
        self.assertAlmostEqual(deltas["arc_hit_pct"], 75.0)
        self.assertAlmostEqual(deltas["l2_hit_pct"], 75.0)
        self.assertEqual(deltas["l2_size"], 4096)

    def test_no_reads_or_no_snapshot(self):
        same = {"hits": 5, "misses": 5, "l2_hits": 0, "l2_misses": 0}
        self.assertIsNone(runner.hit_deltas(same, same)["arc_hit_pct"])
        self.assertIsNone(runner.hit_deltas(None, same))


if __name__ == "__main__":
    unittest.main()
