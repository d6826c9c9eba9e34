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
