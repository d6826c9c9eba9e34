"""The SVG charts are well-formed XML with one mark per data point, and the run's plots
come out of made-up results."""

import os
import sys
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import plots, svg  # noqa: E402
from harness.test_report import record, results, workload  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"


def parse(text):
    root = ET.fromstring(text)
    assert root.tag == NS + "svg", root.tag
    return root


def texts(root):
    return [t.text for t in root.iter(NS + "text")]


class Ticks(unittest.TestCase):
    def test_linear_ticks_are_round_and_cover_the_range(self):
        self.assertEqual(svg.linear_ticks(0, 9500), [0, 2000, 4000, 6000, 8000, 10000])
        self.assertEqual(svg.linear_ticks(0, 1), [0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0])

    def test_log_ticks_are_decades(self):
        self.assertEqual(svg.log_ticks(0.05, 30), [0.01, 0.1, 1.0, 10.0, 100.0])
        self.assertEqual(svg.log_ticks(1.0, 1.0), [1.0, 10.0])

    def test_number_labels(self):
        self.assertEqual(svg.fmt_number(12000), "12k")
        self.assertEqual(svg.fmt_number(1500000), "1.5M")
        self.assertEqual(svg.fmt_number(0.25), "0.25")
        self.assertEqual(svg.fmt_number(0), "0")
        self.assertEqual(svg.fmt_number(0.001), "1e-03")

    def test_bar_labels_have_three_significant_digits(self):
        self.assertEqual([svg.fmt_value(v) for v in (0.0812345, 8.193, 99.95, 206.569, 1234)],
                         ["0.0812", "8.19", "100", "207", "1.2k"])


class LineChart(unittest.TestCase):
    def test_one_polyline_and_a_circle_per_point(self):
        series = [
            {"name": "larch, ARC + L2", "points": [(3, 5000), (6, 9000), (9, 14000)]},
            {"name": "nbdkit <cache> & \"delay\"", "points": [(3, 160), (6, 330)]},
        ]
        root = parse(svg.line_chart(series, "warm-up & more", "seconds", "IOPS"))
        self.assertEqual(len(list(root.iter(NS + "polyline"))), 2)
        self.assertEqual(len(list(root.iter(NS + "circle"))), 5)
        self.assertIn("nbdkit <cache> & \"delay\"", texts(root))
        self.assertIn("warm-up & more", texts(root))

    def test_points_stay_inside_the_canvas(self):
        root = parse(svg.line_chart([{"name": "s", "points": [(1, 10), (8, 80), (64, 20)]}], "t", "x", "y",
                                    x_log2=True))
        width, height = float(root.get("width")), float(root.get("height"))
        for circle in root.iter(NS + "circle"):
            self.assertTrue(0 <= float(circle.get("cx")) <= width)
            self.assertTrue(0 <= float(circle.get("cy")) <= height)
        # Log-2 x axis: ticks at the data's x values.
        self.assertTrue({"1", "8", "64"} <= set(texts(root)))

    def test_empty_series_are_dropped(self):
        root = parse(svg.line_chart([{"name": "a", "points": []}, {"name": "b", "points": [(0, 1)]}], "t", "x", "y"))
        self.assertEqual(len(list(root.iter(NS + "polyline"))), 1)


class BarChart(unittest.TestCase):
    def test_one_bar_per_value_and_gaps_for_missing_ones(self):
        series = [{"name": "larch", "values": [0.08, 0.3, 1.9, None]},
                  {"name": "nbdkit", "values": [0.07, 2.0, 6.4, 12.0]}]
        root = parse(svg.bar_chart(["p50", "p90", "p99", "p99.9"], series, "latency", "ms"))
        bars = [r for r in root.iter(NS + "rect") if r.find(NS + "title") is not None]
        self.assertEqual(len(bars), 7)
        bottom = max(float(b.get("y")) + float(b.get("height")) for b in bars)
        for bar in bars:
            # Every bar stands on the same axis; taller means slower.
            self.assertAlmostEqual(float(bar.get("y")) + float(bar.get("height")), bottom, places=1)
        heights = {b.find(NS + "title").text: float(b.get("height")) for b in bars}
        self.assertGreater(heights["nbdkit p99: 6.4"], heights["larch p99: 1.9"])


class RunPlots(unittest.TestCase):
    def test_every_chart_of_a_run_parses(self):
        warm = workload(
            [
                record("larch-l2", 5000, label="window 1", matches=["cold"], default=False, series="larch, ARC + L2", x=3.1),
                record("larch-l2", 9000, label="window 2", matches=["warm"], series="larch, ARC + L2", x=6.2),
                record("larch-l2", 12000, label="after restart, window 1", matches=["restart"], default=False,
                       series="larch, ARC + L2, after restart", x=3.0),
                record("fio-device", 100000),
            ],
            refs=(("limit", "fio-device"),), name="l2-warmup", kind="warmup",
        )
        scaling = workload(
            [record(s, i * 1000, label="jobs=%d" % n, matches=["jobs=%d" % n], series=s, x=n)
             for s in ("larch-arc", "nbdkit-cache") for i, n in enumerate((1, 8, 64), 1)],
            name="scaling", kind="scaling",
        )
        charts = plots.make(results([warm, scaling]))
        names = [name for _, name, _, _ in charts]
        self.assertEqual(names, ["l2-warmup-latency.svg", "l2-warmup-warmup.svg",
                                 "scaling-latency.svg", "scaling-scaling.svg"])
        for _, _, _, text in charts:
            parse(text)
        warmup = parse(charts[1][3])
        # Two larch series and the device's flat line.
        self.assertEqual(len(list(warmup.iter(NS + "polyline"))), 3)


if __name__ == "__main__":
    unittest.main()
