"""Hand-written SVG charts: a line chart (warm-up curves, thread scaling) and a grouped bar
chart on a logarithmic axis (latency percentiles). Standard library only.

Every string that reaches the document goes through `escape`, so that labels with `&`,
`<` or quotes keep it well-formed XML.
"""

import math
from xml.sax.saxutils import escape, quoteattr

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")

FONT = 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif"'


def nice_step(span, count):
    """A 1-2-5 step that cuts `span` into about `count` intervals."""
    if span <= 0:
        return 1.0
    raw = span / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def linear_ticks(low, high, count=5):
    """Tick values from a multiple of the step at or below `low` to one at or above `high`."""
    step = nice_step(high - low, count)
    first = math.floor(low / step) * step
    last = math.ceil(high / step) * step
    n = int(round((last - first) / step))
    return [first + i * step for i in range(n + 1)]


def log_ticks(low, high):
    """Powers of ten covering [low, high] (both > 0)."""
    first = math.floor(math.log10(low))
    last = math.ceil(math.log10(high))
    if last == first:
        last += 1
    return [10.0 ** e for e in range(first, last + 1)]


def fmt_number(value):
    """Short tick labels: 12k, 1.5M, 0.25, 1e-03."""
    magnitude = abs(value)
    if magnitude >= 1e6:
        return "%gM" % round(value / 1e6, 2)
    if magnitude >= 1e3:
        return "%gk" % round(value / 1e3, 2)
    if magnitude == 0 or magnitude >= 0.01:
        return "%g" % round(value, 3)
    return "%.0e" % value


def fmt_value(value):
    """A data label with three significant digits: 0.0812, 8.19, 207, 1.2k."""
    rounded = float("%.3g" % value)
    if abs(rounded) >= 1000:
        return fmt_number(float("%.2g" % value))
    return "%d" % rounded if abs(rounded) >= 100 else "%g" % rounded


def _text(x, y, content, size=12, anchor="start", extra=""):
    return '<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s" %s%s>%s</text>' % (
        x, y, size, anchor, FONT, extra, escape(str(content)))


def _document(width, height, body):
    head = '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">' % (
        width, height, width, height)
    background = '<rect x="0" y="0" width="%d" height="%d" fill="white"/>' % (width, height)
    return "\n".join([head, background, *body, "</svg>"]) + "\n"


def _legend(names, colors, x, y):
    body = []
    for i, name in enumerate(names):
        top = y + 18 * i
        body.append('<rect x="%.1f" y="%.1f" width="14" height="10" fill=%s/>' % (x, top - 9, quoteattr(colors[i])))
        body.append(_text(x + 20, top, name, size=12))
    return body


class _Frame:
    """The plot area of a chart and its axes."""

    def __init__(self, width, height, legend_rows, left=72, right=24, top=40, bottom=56):
        self.width = width
        self.left = left
        self.top = top
        self.plot_w = width - left - right
        self.plot_h = height - top - bottom - 18 * legend_rows
        self.bottom = top + self.plot_h
        self.height = height

    def axes(self, title, x_label, y_label):
        return [
            _text(self.width / 2, 22, title, size=15, anchor="middle", extra=' font-weight="bold"'),
            '<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>'
            % (self.left, self.bottom, self.left + self.plot_w, self.bottom),
            '<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>'
            % (self.left, self.top, self.left, self.bottom),
            _text(self.left + self.plot_w / 2, self.bottom + 38, x_label, anchor="middle"),
            _text(16, self.top + self.plot_h / 2, y_label, anchor="middle",
                  extra=' transform="rotate(-90 16 %.1f)"' % (self.top + self.plot_h / 2)),
        ]

    def y_tick(self, y, label):
        return [
            '<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#dddddd"/>'
            % (self.left, y, self.left + self.plot_w, y),
            _text(self.left - 6, y + 4, label, size=11, anchor="end"),
        ]

    def x_tick(self, x, label):
        return [
            '<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>' % (x, self.bottom, x, self.bottom + 5),
            _text(x, self.bottom + 18, label, size=11, anchor="middle"),
        ]


def line_chart(series, title, x_label, y_label, width=760, height=440, x_log2=False):
    """Lines of (x, y) points, one per series: [{"name": str, "points": [(x, y), ...]}].

    With `x_log2` the x axis is logarithmic (base 2) and ticks sit at the data's x values.
    The y axis starts at 0.
    """
    series = [s for s in series if s["points"]]
    frame = _Frame(width, height, legend_rows=len(series))
    xs = [x for s in series for x, _ in s["points"]] or [0, 1]
    ys = [y for s in series for _, y in s["points"]] or [1]

    def xpos(x):
        return math.log2(x) if x_log2 else x

    if x_log2:
        x_ticks = sorted(set(xs))
    else:
        x_ticks = linear_ticks(min(0, min(xs)), max(xs))
    x_low, x_high = xpos(min(x_ticks)), xpos(max(x_ticks))
    y_ticks = linear_ticks(0, max(max(ys), 1e-9))
    y_high = y_ticks[-1] or 1

    def px(x):
        span = (x_high - x_low) or 1
        return frame.left + (xpos(x) - x_low) / span * frame.plot_w

    def py(y):
        return frame.bottom - y / y_high * frame.plot_h

    body = []
    for y in y_ticks:
        body += frame.y_tick(py(y), fmt_number(y))
    for x in x_ticks:
        body += frame.x_tick(px(x), fmt_number(x))
    body += frame.axes(title, x_label, y_label)
    colors = [s.get("color") or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]
    for s, color in zip(series, colors):
        points = " ".join("%.1f,%.1f" % (px(x), py(y)) for x, y in s["points"])
        body.append('<polyline fill="none" stroke=%s stroke-width="2" points="%s"/>' % (quoteattr(color), points))
        for x, y in s["points"]:
            body.append(
                '<circle cx="%.1f" cy="%.1f" r="3" fill=%s><title>%s</title></circle>'
                % (px(x), py(y), quoteattr(color), escape("%s: %s at %s" % (s["name"], fmt_number(y), fmt_number(x))))
            )
    body += _legend([s["name"] for s in series], colors, frame.left, frame.bottom + 62)
    return _document(width, height, body)


def bar_chart(categories, series, title, y_label, width=760, height=440):
    """Grouped bars on a log-10 y axis: one group per category, one bar per series.

    `series` is [{"name": str, "values": [value or None per category]}]; values must be
    > 0 to be drawn (a missing value leaves a gap).
    """
    frame = _Frame(width, height, legend_rows=len(series))
    values = [v for s in series for v in s["values"] if v is not None and v > 0]
    low, high = (min(values), max(values)) if values else (1.0, 10.0)
    ticks = log_ticks(low, high)
    log_low, log_high = math.log10(ticks[0]), math.log10(ticks[-1])

    def py(value):
        return frame.bottom - (math.log10(value) - log_low) / (log_high - log_low) * frame.plot_h

    body = []
    for tick in ticks:
        body += frame.y_tick(py(tick), fmt_number(tick))
    body += frame.axes(title, "", y_label)
    group_w = frame.plot_w / max(len(categories), 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    colors = [s.get("color") or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]
    for c, category in enumerate(categories):
        group_x = frame.left + c * group_w
        body.append(_text(group_x + group_w / 2, frame.bottom + 18, category, size=12, anchor="middle"))
        for i, (s, color) in enumerate(zip(series, colors)):
            value = s["values"][c]
            if value is None or value <= 0:
                continue
            x = group_x + group_w * 0.1 + i * bar_w
            y = py(value)
            body.append(
                '<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill=%s><title>%s</title></rect>'
                % (x, y, max(bar_w - 2, 1), frame.bottom - y, quoteattr(color),
                   escape("%s %s: %s" % (s["name"], category, fmt_number(value))))
            )
            if bar_w >= 30:
                body.append(_text(x + bar_w / 2 - 1, y - 3, fmt_value(value), size=9, anchor="middle"))
    body += _legend([s["name"] for s in series], colors, frame.left, frame.bottom + 62)
    return _document(width, height, body)
