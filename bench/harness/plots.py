"""Which charts a run gets, drawn from its results with `svg`.

- every workload: a bar chart of latency percentiles (p50, p90, p99, p99.9) of its
  reported runs, on a log scale;
- the warm-up workload: IOPS per window from a cold start (and after larch's restart),
  with the device limit as a flat line;
- thread scaling: IOPS against the number of jobs.
"""

from harness import fio, svg, systems

COLORS = {
    "larch-arc": "#2ca02c",
    "larch-l2": "#1f77b4",
    "larch-log": "#17becf",
    "nbdkit-cache": "#d62728",
    "nbdkit-cache-capped": "#ff7f0e",
    "nbdkit-memory": "#8c564b",
    "nbdkit-tmpfs": "#7f7f7f",
    "fio-device": "#000000",
}
RESTART_COLOR = "#9467bd"
PERCENTILES = ((50, "p50"), (90, "p90"), (99, "p99"), (99.9, "p99.9"))


def _run_name(record):
    name = systems.label(record["system"])
    return "%s, %s" % (name, record["label"]) if record["label"] else name


def latency_chart(workload):
    records = [r for r in workload["records"] if r.get("report")]
    if not records:
        return None
    series = [
        {
            "name": _run_name(r),
            "color": COLORS.get(r["system"]),
            "values": [_ms(fio.latency(r["fio"], workload["latency"], p)) for p, _ in PERCENTILES],
        }
        for r in records
    ]
    # Several runs of one system (windows, phases) would share its colour: let the palette
    # tell them apart instead.
    if len({r["system"] for r in records}) < len(records):
        for s in series:
            s.pop("color")
    which = {"read": "read", "write": "write", "sync": "flush"}[workload["latency"]]
    title = "%s: %s latency" % (workload["name"], which)
    return svg.bar_chart([name for _, name in PERCENTILES], series, title, "ms (log scale)")


def _ms(us):
    return None if us is None else us / 1000.0


def warmup_chart(workload):
    series = {}
    colors = {}
    for record in workload["records"]:
        if record.get("series") and record.get("x") is not None:
            series.setdefault(record["series"], []).append((record["x"], record["fio"]["iops"]))
            restart = record["series"].endswith("after restart")
            colors[record["series"]] = RESTART_COLOR if restart else COLORS.get(record["system"])
    if not series:
        return None
    lines = [{"name": name, "points": points, "color": colors[name]} for name, points in series.items()]
    device = [r for r in workload["records"] if r["system"] == "fio-device" and r.get("report")]
    if device:
        right = max(x for line in lines for x, _ in line["points"])
        iops = device[0]["fio"]["iops"]
        lines.append({"name": "fio on the cache device file (limit)", "points": [(0, iops), (right, iops)],
                      "color": COLORS["fio-device"]})
    title = "%s: IOPS per window from a cold start" % workload["name"]
    return svg.line_chart(lines, title, "seconds since start (end of each window)", "IOPS")


def scaling_chart(workload):
    series = {}
    for record in workload["records"]:
        if record.get("x") is not None and record.get("report"):
            series.setdefault(record["system"], []).append((record["x"], record["fio"]["iops"]))
    if not series:
        return None
    lines = [{"name": systems.label(s), "points": sorted(p), "color": COLORS.get(s)} for s, p in series.items()]
    return svg.line_chart(lines, "%s: IOPS by number of jobs (QD1 each)" % workload["name"], "fio jobs", "IOPS",
                          x_log2=True)


def make(results):
    """[(workload, file name, title, svg text)] for every chart of the run."""
    charts = []
    for workload in results["workloads"]:
        candidates = [("latency", "latency percentiles", latency_chart(workload))]
        if workload["kind"] == "warmup":
            candidates.append(("warmup", "IOPS per window, cold to warm", warmup_chart(workload)))
        if workload["kind"] == "scaling":
            candidates.append(("scaling", "IOPS by jobs", scaling_chart(workload)))
        for suffix, title, text in candidates:
            if text is not None:
                charts.append((workload, "%s-%s.svg" % (workload["name"], suffix), "%s: %s" % (workload["name"], title), text))
    return charts
