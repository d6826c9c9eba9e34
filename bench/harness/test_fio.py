"""fio's JSON output: the tolerant extractor and the summary, on fio runs recorded here.

testdata/fio-nbd-randread.json is fio 3.33's stdout for 8K random reads through the nbd
engine against `nbdkit memory` (2 jobs, group reporting); it starts with the engine's
"fio: connected to NBD server" lines. testdata/fio-psync-randrw-fsync.json is a psync
4K 50/50 random read/write job with fsync=1 on a file.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import fio  # noqa: E402

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


def fixture(name):
    with open(os.path.join(TESTDATA, name), encoding="utf-8") as file:
        return file.read()


class ExtractJson(unittest.TestCase):
    def test_skips_the_nbd_engine_lines_before_the_document(self):
        text = fixture("fio-nbd-randread.json")
        self.assertTrue(text.startswith("fio: connected to NBD server"))
        document = fio.extract_json(text)
        self.assertEqual(document["fio version"], "fio-3.33")

    def test_ignores_braces_inside_a_line_and_text_after_the_document(self):
        text = 'fio: warning {not json}\n{"jobs": [], "x": 1}\nfio: file hash not empty on exit\n'
        self.assertEqual(fio.extract_json(text), {"jobs": [], "x": 1})

    def test_skips_a_line_starting_with_a_brace_that_is_not_json(self):
        self.assertEqual(fio.extract_json('{oops\n{"a": 2}\n'), {"a": 2})

    def test_no_document_is_an_error(self):
        with self.assertRaises(fio.FioError):
            fio.extract_json("fio: engine nbd not loadable\n")
        with self.assertRaises(fio.FioError):
            fio.extract_json("")


class Summarize(unittest.TestCase):
    def test_nbd_random_reads(self):
        summary = fio.parse(fixture("fio-nbd-randread.json"))
        self.assertEqual(summary["error"], 0)
        self.assertAlmostEqual(summary["iops"], 84424.302789)
        self.assertAlmostEqual(summary["read"]["iops"], 84424.302789)
        self.assertEqual(summary["read"]["ios"], 84762)
        self.assertEqual(summary["io_bytes"], 84762 * 8192)
        self.assertIsNone(summary["write"])
        self.assertIsNone(summary["sync"])
        # fio reports nanoseconds; the summary microseconds.
        self.assertAlmostEqual(fio.latency(summary, "read", 50), 43.776)
        self.assertAlmostEqual(fio.latency(summary, "read", 99.9), 3588.096)
        self.assertIsNone(fio.latency(summary, "write", 50))
        self.assertIsNone(fio.latency(summary, "read", 42))
        # The group's wall time, not the sum of its two jobs' runtimes.
        self.assertEqual(summary["runtime_ms"], 1004)

    def test_percentiles_survive_a_round_trip_through_json(self):
        summary = fio.parse(fixture("fio-nbd-randread.json"))
        again = json.loads(json.dumps(summary))
        self.assertEqual(again, summary)
        self.assertAlmostEqual(fio.latency(again, "read", 99), 831.488)
        self.assertEqual(fio.percentile_key(99.900000), "99.9")
        self.assertEqual(fio.percentile_key("50.000000"), "50")

    def test_mixed_reads_and_writes_with_fsync(self):
        summary = fio.parse(fixture("fio-psync-randrw-fsync.json"))
        self.assertAlmostEqual(summary["read"]["iops"], 3455.544456)
        self.assertAlmostEqual(summary["write"]["iops"], 3568.431568)
        self.assertAlmostEqual(summary["iops"], 3455.544456 + 3568.431568)
        self.assertAlmostEqual(summary["bw_bytes"], summary["read"]["bw_bytes"] + summary["write"]["bw_bytes"])
        self.assertIsNotNone(summary["sync"])
        self.assertGreater(summary["sync"]["ios"], 0)
        self.assertGreater(fio.latency(summary, "sync", 99), 0)
        self.assertAlmostEqual(fio.latency(summary, "read", 50), 62.72)

    def test_needs_one_group_reported_job(self):
        document = fio.extract_json(fixture("fio-nbd-randread.json"))
        with self.assertRaises(fio.FioError):
            fio.summarize(dict(document, jobs=document["jobs"] * 2))
        with self.assertRaises(fio.FioError):
            fio.summarize(dict(document, jobs=[]))

    def test_a_job_error_is_reported(self):
        document = fio.extract_json(fixture("fio-nbd-randread.json"))
        job = dict(document["jobs"][0], error=5)
        self.assertEqual(fio.summarize(dict(document, jobs=[job]))["error"], 5)


class Command(unittest.TestCase):
    def test_options_in_order_with_flags(self):
        argv = fio.command({"name": "x", "rw": "randread", "norandommap": None, "size": 8192})
        self.assertEqual(argv, ["fio", "--name=x", "--rw=randread", "--norandommap", "--size=8192"])


if __name__ == "__main__":
    unittest.main()
