// Charts of the Analytics page, drawn on canvas: time series (lines or stacked areas) and
// latency heat maps. No chart library: the page must work with no network, and what it
// needs (a shared time axis, event marks, a cursor, drag to zoom, heat maps over
// log-spaced buckets on a linear or log latency axis) is small enough to own.
//
// Every chart draws the same view: a time range [from, to] (seconds since the epoch), an
// optional cursor time and the events. The page owns the view and calls draw() when the
// view or the data changes.
"use strict";

const Charts = (() => {
  const PALETTE = ["#1f5fa8", "#d9822b", "#2e9e5b", "#b8333a", "#7a52b3", "#8c6d31",
    "#2aa6b8", "#c2548f", "#5b6770", "#9aa631"];
  const EVENT_COLORS = { switch: "#e07000", restart: "#c0202a", tunable: "#7a7a7a" };
  // The colour of the pool's other events by what they are about: trouble red, rebuilds
  // green, stalls purple, the rest blue-grey.
  const TROUBLE = ["cache.fault", "log.fault", "volume.fail", "lease.lost", "lease.lapse"];
  function eventColor(e) {
    if (EVENT_COLORS[e.kind]) return EVENT_COLORS[e.kind];
    if (TROUBLE.includes(e.kind)) return "#c0202a";
    if (e.kind.startsWith("l2arc.rebuild")) return "#2e9e5b";
    if (e.kind.startsWith("txg.")) return "#7a52b3";
    return "#5b6770";
  }
  // Short marks for the pool's events on a chart (the tooltip has the whole text).
  const EVENT_LABELS = {
    "pool.close": "closed", "cache.add": "cache added", "cache.remove": "cache removed",
    "cache.fault": "cache fault", "cache.online": "cache back",
    "l2arc.rebuild_start": "rebuild", "l2arc.rebuild_end": "rebuilt",
    "volume.property": "property", "volume.fail": "volume failed",
    "log.add": "log added", "log.remove": "log removed", "log.fault": "log fault",
    "txg.stall": "TXG stall", "txg.stall_end": "stall over",
    "lease.take": "lease", "lease.lost": "lease lost", "lease.lapse": "lease lapsed",
    "lease.resume": "lease back", "lease.release": "lease released",
  };
  const MARGIN = { left: 62, right: 10, top: 10, bottom: 20 };

  // ---- formatting -------------------------------------------------------------------

  const SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  const BIN = [[2 ** 40, "Ti"], [2 ** 30, "Gi"], [2 ** 20, "Mi"], [2 ** 10, "Ki"]];

  function short(v, digits) {
    const text = v.toFixed(digits);
    return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
  }

  // A value with its unit, scaled: bytes in binary multiples, the rest in SI ones.
  function value(v, unit) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    unit = unit || "";
    if (unit === "%") return short(v, v < 10 ? 2 : 1) + " %";
    if (unit.startsWith("bytes")) {
      const rest = unit.slice(5);
      const a = Math.abs(v);
      for (const [m, p] of BIN) {
        if (a >= m) return short(v / m, a / m < 10 ? 2 : 1) + " " + p + "B" + rest;
      }
      return short(v, 0) + " B" + rest;
    }
    const a = Math.abs(v);
    for (const [m, p] of SI) {
      if (a >= m) return short(v / m, a / m < 10 ? 2 : 1) + p + (unit ? " " + unit : "");
    }
    return short(v, a < 10 ? 2 : 1) + (unit ? " " + unit : "");
  }

  // A value on an axis: scaled like value(), without the unit (the title carries it) but
  // for the binary prefix of bytes and the percent sign.
  function axisValue(v, unit) {
    unit = unit || "";
    if (unit === "%") return short(v, 1) + "%";
    if (unit.startsWith("bytes")) {
      const a = Math.abs(v);
      for (const [m, p] of BIN) if (a >= m) return short(v / m, a / m < 10 ? 2 : 1) + " " + p + "B";
      return short(v, a < 10 ? 2 : 0) + " B";
    }
    return value(v, "");
  }

  // A latency in microseconds.
  function micros(us) {
    if (!Number.isFinite(us)) return "∞";
    if (us >= 1e6) return short(us / 1e6, 2) + " s";
    if (us >= 1e3) return short(us / 1e3, 2) + " ms";
    return short(us, us < 10 ? 2 : 1) + " µs";
  }

  function pad2(n) {
    return String(n).padStart(2, "0");
  }

  // A time on the axis: seconds shown when the range is short.
  // How times read: the wall clock (a daemon's history), or time since the start (a
  // simulation's virtual time, set with elapsedClock()).
  let elapsed = false;

  function clock(t, withSeconds) {
    if (elapsed) {
      const s = Math.round(t);
      const d = Math.floor(s / 86400);
      const h = Math.floor((s % 86400) / 3600);
      const m = Math.floor((s % 3600) / 60);
      const hm = (d ? d + "d " + pad2(h) : String(h)) + ":" + pad2(m);
      return withSeconds ? hm + ":" + pad2(s % 60) : hm;
    }
    const d = new Date(t * 1000);
    const hm = pad2(d.getHours()) + ":" + pad2(d.getMinutes());
    return withSeconds ? hm + ":" + pad2(d.getSeconds()) : hm;
  }

  function elapsedClock() {
    elapsed = true;
  }

  // ---- axes -------------------------------------------------------------------------

  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    21600, 43200, 86400];

  function timeTicks(from, to, width) {
    const want = Math.max(2, Math.floor(width / 90));
    const span = to - from;
    const step = TIME_STEPS.find((s) => span / s <= want) || 86400;
    const ticks = [];
    // Ticks on round local times (the offset makes minutes and hours round locally).
    const offset = elapsed ? 0 : new Date(from * 1000).getTimezoneOffset() * 60;
    let t = Math.ceil((from - offset) / step) * step + offset;
    for (; t <= to; t += step) ticks.push(t);
    return { ticks, seconds: step < 60 };
  }

  function relativeTicks(view, width) {
    const want = Math.max(2, Math.floor(width / 90));
    const span = view.to - view.from;
    const step = TIME_STEPS.find((s) => span / s <= want) || 86400;
    const ticks = [];
    for (let t = view.from; t <= view.to; t += step) ticks.push(t);
    return ticks;
  }

  function niceMax(max) {
    if (!(max > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(max));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) {
      if (m * p >= max) return m * p;
    }
    return 10 * p;
  }

  // ---- the canvas -------------------------------------------------------------------

  // A canvas that fills its container's width at the device's pixel ratio.
  class Surface {
    constructor(parent, height) {
      this.canvas = document.createElement("canvas");
      this.canvas.style.height = height + "px";
      parent.appendChild(this.canvas);
      this.cssHeight = height;
      this.resize();
    }

    resize() {
      const ratio = window.devicePixelRatio || 1;
      const width = Math.max(200, this.canvas.parentElement.clientWidth);
      if (this.cssWidth === width && this.ratio === ratio) return false;
      this.cssWidth = width;
      this.ratio = ratio;
      this.canvas.style.width = width + "px";
      this.canvas.width = Math.round(width * ratio);
      this.canvas.height = Math.round(this.cssHeight * ratio);
      return true;
    }

    context() {
      const g = this.canvas.getContext("2d");
      g.setTransform(this.ratio, 0, 0, this.ratio, 0, 0);
      g.clearRect(0, 0, this.cssWidth, this.cssHeight);
      g.font = "11px system-ui, sans-serif";
      return g;
    }

    plot() {
      return {
        x: MARGIN.left,
        y: MARGIN.top,
        w: this.cssWidth - MARGIN.left - MARGIN.right,
        h: this.cssHeight - MARGIN.top - MARGIN.bottom,
      };
    }
  }

  // "+m:ss" from the start of the view, for charts that overlay ranges.
  function sinceStart(t, view) {
    const d = Math.round(t - view.from);
    const h = Math.floor(d / 3600);
    const m = Math.floor((d % 3600) / 60);
    return "+" + (h ? h + ":" + pad2(m) : m) + ":" + pad2(d % 60);
  }

  // The time axis: labels under the plot, and grid lines across it (only a tick below
  // it when `grid` is false: a heat map's cells must not be hidden by lines).
  function drawTimeAxis(g, plot, view, grid = true) {
    const { ticks, seconds } = view.relative
      ? { ticks: relativeTicks(view, plot.w), seconds: true } : timeTicks(view.from, view.to, plot.w);
    g.fillStyle = "#666";
    g.strokeStyle = grid ? "#eee" : "#bbb";
    g.textAlign = "center";
    g.textBaseline = "top";
    for (const t of ticks) {
      const x = plot.x + ((t - view.from) / (view.to - view.from)) * plot.w;
      g.beginPath();
      g.moveTo(x + 0.5, grid ? plot.y : plot.y + plot.h);
      g.lineTo(x + 0.5, plot.y + plot.h + (grid ? 0 : 3));
      g.stroke();
      g.fillText(view.relative ? sinceStart(t, view) : clock(t, seconds), x, plot.y + plot.h + 4);
    }
  }

  // What an event says on a chart: the switch as on/off, a tunable and a restart as the
  // daemon wrote them, the pool's other events by a short name of their class.
  function eventLabel(e) {
    if (e.kind === "switch") return /=0$/.test(e.text) ? "L2ARC off" : "L2ARC on";
    return EVENT_LABELS[e.kind] || e.text;
  }

  // Where each event of the view is marked on `chart`: its x in the plot, and in the page.
  function eventMarks(chart) {
    const plot = chart.surface.plot();
    const view = chart.view;
    const r = chart.surface.canvas.getBoundingClientRect();
    const out = [];
    for (const e of view.events || []) {
      if (e.time < view.from || e.time > view.to) continue;
      const x = Math.round(plot.x + ((e.time - view.from) / (view.to - view.from)) * plot.w);
      out.push({ event: e, x, pageX: r.left + x + 0.5, pageTop: r.top + plot.y,
        pageBottom: r.top + plot.y + plot.h, label: eventLabel(e) });
    }
    return out;
  }

  // The event marked nearest to `p` (within 4 px of its line, inside the plot), if any.
  function eventNear(chart, p) {
    const plot = chart.surface.plot();
    if (!p || p.y < plot.y || p.y > plot.y + plot.h) return null;
    let best = null;
    for (const m of eventMarks(chart)) {
      const d = Math.abs(m.x - p.x);
      if (d <= 4 && (best === null || d < best.d)) best = { d, event: m.event };
    }
    return best && best.event;
  }

  // Shows the event near the mouse in the page's tooltip; whether there was one.
  function showEvent(chart, p, e) {
    const tip = chart.options.tooltip;
    const event = tip ? eventNear(chart, p) : null;
    if (!event) return false;
    tip.show(chart, e, "<b>" + escapeHtml(eventLabel(event)) + "</b> <span class=\"kind\">" +
      escapeHtml(event.kind) + "</span><br>" + clock(event.time, true) + "<br>" +
      escapeHtml(event.text), { event, time: event.time });
    return true;
  }

  // Each event is a dashed line; its label goes right of the line (left near the right
  // edge), on the first of three rows where it overlaps no other label, or nowhere.
  function drawEvents(g, plot, view) {
    g.save();
    g.setLineDash([4, 3]);
    g.textBaseline = "top";
    const rows = [[], [], []];
    for (const e of view.events || []) {
      if (e.time < view.from || e.time > view.to) continue;
      const x = Math.round(plot.x + ((e.time - view.from) / (view.to - view.from)) * plot.w);
      g.strokeStyle = eventColor(e);
      g.beginPath();
      g.moveTo(x + 0.5, plot.y);
      g.lineTo(x + 0.5, plot.y + plot.h);
      g.stroke();
      const text = eventLabel(e);
      const w = g.measureText(text).width;
      const right = x + 3 + w <= plot.x + plot.w;
      const a = right ? x + 3 : x - 3 - w;
      const row = rows.findIndex((r) => r.every(([l, h]) => a + w + 4 < l || a > h + 4));
      if (row < 0) continue;
      rows[row].push([a, a + w]);
      g.fillStyle = "rgba(255, 255, 255, 0.8)";
      g.fillRect(a - 1, plot.y + 1 + row * 13, w + 2, 12);
      g.fillStyle = g.strokeStyle;
      g.textAlign = "left";
      g.fillText(text, a, plot.y + 1 + row * 13);
    }
    g.restore();
  }

  function drawCursor(g, plot, view, selection) {
    if (selection) {
      const [a, b] = selection;
      g.fillStyle = "rgba(31, 95, 168, 0.15)";
      g.fillRect(Math.min(a, b), plot.y, Math.abs(b - a), plot.h);
    }
    if (view.cursor === null || view.cursor === undefined) return;
    if (view.cursor < view.from || view.cursor > view.to) return;
    const x = Math.round(plot.x + ((view.cursor - view.from) / (view.to - view.from)) * plot.w);
    g.strokeStyle = "rgba(0, 0, 0, 0.45)";
    g.beginPath();
    g.moveTo(x + 0.5, plot.y);
    g.lineTo(x + 0.5, plot.y + plot.h);
    g.stroke();
  }

  // Mouse handling shared by both chart kinds: the cursor follows the mouse (reported as a
  // time), and a drag selects a time range.
  function track(chart, hooks) {
    const canvas = chart.surface.canvas;
    let dragFrom = null;
    const at = (e) => {
      const r = canvas.getBoundingClientRect();
      return { x: e.clientX - r.left, y: e.clientY - r.top };
    };
    const timeAt = (x) => {
      const plot = chart.surface.plot();
      const view = chart.view;
      const f = Math.min(1, Math.max(0, (x - plot.x) / plot.w));
      return view.from + f * (view.to - view.from);
    };
    canvas.addEventListener("mousemove", (e) => {
      const p = at(e);
      if (dragFrom !== null) chart.selection = [dragFrom, p.x];
      hooks.cursor(timeAt(p.x), p, e);
      // An event's mark under the mouse: its tooltip, over a heat map cell's.
      if (!showEvent(chart, p, e) && chart.options.tooltip && !chart.hover) {
        chart.options.tooltip.hide(chart);
      }
    });
    canvas.addEventListener("mouseleave", () => {
      if (dragFrom === null) hooks.cursor(null, null, null);
      if (chart.options.tooltip) chart.options.tooltip.hide(chart);
    });
    canvas.addEventListener("mousedown", (e) => {
      dragFrom = at(e).x;
      chart.selection = null;
    });
    window.addEventListener("mouseup", (e) => {
      if (dragFrom === null) return;
      const x = at(e).x;
      const [a, b] = [Math.min(dragFrom, x), Math.max(dragFrom, x)];
      dragFrom = null;
      chart.selection = null;
      if (b - a >= 6) hooks.select(timeAt(a), timeAt(b));
      else hooks.cursor(null, null, null);
    });
  }

  // ---- time series ------------------------------------------------------------------

  // A chart of lines (or stacked areas) over time. setData() takes the interval ends,
  // their length (the step) and the lines, each { label, values, color?, dashed?, times? }
  // (a line with times of its own is drawn at those; stacked charts share the chart's).
  class TimeChart {
    constructor(parent, options) {
      this.options = options;
      this.box = document.createElement("div");
      this.box.className = "chart";
      const title = document.createElement("h3");
      title.textContent = options.title;
      if (options.unit) {
        const unit = document.createElement("span");
        unit.className = "unit";
        unit.textContent = " " + options.unit;
        title.appendChild(unit);
      }
      this.box.appendChild(title);
      parent.appendChild(this.box);
      this.surface = new Surface(this.box, options.height || 140);
      this.legend = document.createElement("div");
      this.legend.className = "legend";
      this.box.appendChild(this.legend);
      this.lines = [];
      this.times = [];
      this.step = 1;
      this.view = { from: 0, to: 1, events: [] };
      this.selection = null;
      track(this, options.hooks);
    }

    setData(times, step, lines) {
      this.times = times;
      this.step = step;
      this.lines = lines.map((l, i) => ({ ...l, color: l.color || PALETTE[i % PALETTE.length] }));
    }

    // The index of the interval that holds `t` (or the last before it), by binary search
    // in `times` (the chart's, or a line's own).
    indexAt(t, times) {
      times = times || this.times;
      let lo = 0;
      let hi = times.length - 1;
      if (hi < 0 || t < times[0] - this.step) return -1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (times[mid] - this.step < t) lo = mid;
        else hi = mid - 1;
      }
      return lo;
    }

    // The values to draw: stacked charts add each line to those before it.
    drawn() {
      if (!this.options.stacked) return this.lines.map((l) => l.values);
      const sums = new Float64Array(this.times.length);
      return this.lines.map((l) =>
        l.values.map((v, k) => (v === null ? null : (sums[k] += v))));
    }

    draw(view) {
      this.view = view;
      this.surface.resize();
      const g = this.surface.context();
      const plot = this.surface.plot();
      const drawn = this.drawn();
      const span = (i) => {
        const times = this.lines[i].times || this.times;
        return [Math.max(0, this.indexAt(view.from, times)), this.indexAt(view.to, times), times];
      };
      let max = this.options.max || 0;
      if (!this.options.max) {
        drawn.forEach((values, i) => {
          const [first, last] = span(i);
          for (let k = first; k <= last; k++) {
            const v = values[k];
            if (v !== null && v > max) max = v;
          }
        });
        max = niceMax(max);
      }
      drawTimeAxis(g, plot, view);
      // Value axis: four steps.
      g.textAlign = "right";
      g.textBaseline = "middle";
      for (let i = 0; i <= 4; i++) {
        const y = Math.round(plot.y + plot.h - (i / 4) * plot.h) + 0.5;
        g.strokeStyle = i === 0 ? "#bbb" : "#eee";
        g.beginPath();
        g.moveTo(plot.x, y);
        g.lineTo(plot.x + plot.w, y);
        g.stroke();
        g.fillStyle = "#666";
        g.fillText(axisValue((max * i) / 4, this.options.unit), plot.x - 4, y);
      }
      const xOf = (t) => plot.x + ((t - view.from) / (view.to - view.from)) * plot.w;
      const yOf = (v) => plot.y + plot.h - (Math.min(v, max) / max) * plot.h;
      g.save();
      g.beginPath();
      g.rect(plot.x, plot.y, plot.w, plot.h);
      g.clip();
      for (let i = drawn.length - 1; i >= 0; i--) {
        const values = drawn[i];
        const [first, last, times] = span(i);
        const below = this.options.stacked && i > 0 ? drawn[i - 1] : null;
        g.strokeStyle = this.lines[i].color;
        g.lineWidth = this.lines[i].dashed ? 1.2 : 1.5;
        g.setLineDash(this.lines[i].dashed ? [5, 3] : []);
        let open = false;
        let runStart = -1;
        const closeArea = (end) => {
          if (!this.options.stacked || runStart < 0) return;
          // Fill down to the line below (or zero) over the run just drawn.
          const path = new Path2D();
          for (let k = runStart; k <= end; k++) {
            const x = xOf(times[k] - this.step / 2);
            if (k === runStart) path.moveTo(x, yOf(values[k]));
            else path.lineTo(x, yOf(values[k]));
          }
          for (let k = end; k >= runStart; k--) {
            const base = below && below[k] !== null ? below[k] : 0;
            path.lineTo(xOf(times[k] - this.step / 2), yOf(base));
          }
          path.closePath();
          g.fillStyle = this.lines[i].color + "55";
          g.fill(path);
        };
        g.beginPath();
        const lo = Math.max(0, first - 1);
        const hi = Math.min(times.length - 1, last + 1);
        for (let k = lo; k <= hi; k++) {
          const v = values[k];
          if (v === null) {
            if (open) closeArea(k - 1);
            open = false;
            runStart = -1;
            continue;
          }
          const x = xOf(times[k] - this.step / 2);
          if (open) g.lineTo(x, yOf(v));
          else {
            g.moveTo(x, yOf(v));
            runStart = k;
          }
          open = true;
        }
        g.stroke();
        if (open) closeArea(hi);
      }
      g.restore();
      g.setLineDash([]);
      drawEvents(g, plot, view);
      drawCursor(g, plot, view, this.selection);
      this.drawLegend(view);
    }

    // The legend: each line's value at the cursor, or its newest value in the view.
    drawLegend(view) {
      const at = view.cursor !== null && view.cursor !== undefined ? view.cursor : view.to;
      const parts = [];
      for (const line of this.lines) {
        const k = this.indexAt(at, line.times);
        let v = k >= 0 ? line.values[k] : null;
        // Without a cursor, the newest value there is.
        if (view.cursor === null || view.cursor === undefined) {
          for (let j = k; j >= 0 && v === null && j > k - 5; j--) v = line.values[j];
        }
        parts.push('<span><i style="background:' + line.color + '"></i>' +
          escapeHtml(line.label) + " <b>" + value(v, this.options.unit) + "</b></span>");
      }
      const html = parts.join("");
      if (html !== this.legendHtml) {
        this.legend.innerHTML = html;
        this.legendHtml = html;
      }
    }
  }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) =>
      ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  // ---- heat maps --------------------------------------------------------------------

  // Colour of a cell: white for none, then light to dark as the count grows (on a log
  // scale), as the 7410's heat maps: darker is more I/O.
  function heatColour(f) {
    // f in (0, 1]: from pale yellow through orange and red to near black.
    const stops = [[255, 240, 170], [250, 170, 60], [220, 70, 30], [140, 20, 40], [40, 0, 30]];
    const x = Math.min(0.9999, Math.max(0, f)) * (stops.length - 1);
    const i = Math.floor(x);
    const t = x - i;
    const a = stops[i];
    const b = stops[i + 1];
    return [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t];
  }

  // Bounds of bucket i in µs, from the 97 upper bounds the API gives: bucket 0 is at most
  // bounds[0], bucket i is over bounds[i-1] and at most bounds[i], the last is open.
  function bucketBounds(bounds, i) {
    const lo = i === 0 ? 0 : bounds[i - 1];
    const hi = i < bounds.length ? bounds[i] : Infinity;
    return [lo, hi];
  }

  // A latency heat map: x is time, y latency, colour the count of operations. setData()
  // takes the interval ends, the step, the bucket bounds and per interval a Map (or a flat
  // [bucket, count, ...] array) of the non-empty buckets.
  class HeatMap {
    constructor(parent, options) {
      this.options = options;
      this.box = document.createElement("div");
      this.box.className = "chart heat";
      const title = document.createElement("h3");
      title.textContent = options.title;
      this.title = title;
      this.box.appendChild(title);
      parent.appendChild(this.box);
      this.surface = new Surface(this.box, options.height || 170);
      this.note = document.createElement("div");
      this.note.className = "legend";
      this.box.appendChild(this.note);
      this.times = [];
      this.cells = [];
      this.bounds = [];
      this.step = 1;
      this.view = { from: 0, to: 1, events: [] };
      this.selection = null;
      this.image = null;
      this.imageKey = "";
      this.dataVersion = 0;
      this.yMaxUs = 10000;
      this.log = false;
      track(this, {
        cursor: (t, p, e) => {
          options.hooks.cursor(t, p, e);
          this.hover(p, e);
        },
        select: options.hooks.select,
      });
    }

    setData(times, step, bounds, cells) {
      this.times = times;
      this.step = step;
      this.bounds = bounds;
      this.cells = cells;
      this.dataVersion++;
    }

    // The y axis: linear from 0 to yMaxUs (null: up to the largest bucket with a count),
    // or logarithmic from 1 µs.
    setScale(yMaxUs, log) {
      this.yMaxUsAsked = yMaxUs;
      this.log = log;
    }

    // The latency range [lo, hi] µs and the fraction of the plot's height of a bucket.
    yRange() {
      let top = this.yMaxUsAsked;
      if (!top) {
        let highest = 0;
        for (const c of this.cells) {
          for (let j = 0; j < c.length; j += 2) if (c[j + 1] > 0 && c[j] > highest) highest = c[j];
        }
        top = bucketBounds(this.bounds, highest)[1];
        if (!Number.isFinite(top)) top = 2 * this.bounds[this.bounds.length - 1];
        top = Math.max(top, 10);
      }
      return { lo: this.log ? 1 : 0, hi: top };
    }

    frac(us, range) {
      if (this.log) {
        const u = Math.max(us, range.lo);
        return Math.log(u / range.lo) / Math.log(range.hi / range.lo);
      }
      return us / range.hi;
    }

    usAt(f, range) {
      if (this.log) return range.lo * Math.pow(range.hi / range.lo, f);
      return f * range.hi;
    }

    // Builds the image: one column per pixel of the plot, one row per pixel; each bucket's
    // count spread evenly over the rows its latency range covers, so that a colour is a
    // density whatever the buckets' widths on this axis.
    build(plot, view, range) {
      const ratio = this.surface.ratio;
      const W = Math.max(1, Math.round(plot.w * ratio));
      const H = Math.max(1, Math.round(plot.h * ratio));
      const grid = new Float32Array(W * H);
      const first = Math.max(0, this.indexAt(view.from));
      const last = this.indexAt(view.to);
      const span = view.to - view.from;
      for (let k = first; k <= last; k++) {
        const c = this.cells[k];
        if (!c || c.length === 0) continue;
        const t1 = this.times[k];
        const t0 = t1 - this.step;
        let x0 = Math.floor(((t0 - view.from) / span) * W);
        let x1 = Math.ceil(((t1 - view.from) / span) * W) - 1;
        x0 = Math.max(0, x0);
        x1 = Math.min(W - 1, Math.max(x0, x1));
        const columns = x1 - x0 + 1;
        for (let j = 0; j < c.length; j += 2) {
          const [lo, hiRaw] = bucketBounds(this.bounds, c[j]);
          const hi = Number.isFinite(hiRaw) ? hiRaw : lo * 2;
          if (lo >= range.hi) continue;
          const f0 = this.frac(lo, range);
          const f1 = Math.min(1, this.frac(hi, range));
          let r0 = Math.floor(H - f1 * H);
          let r1 = Math.ceil(H - f0 * H) - 1;
          r0 = Math.max(0, r0);
          r1 = Math.min(H - 1, Math.max(r0, r1));
          const share = c[j + 1] / ((r1 - r0 + 1) * columns);
          for (let x = x0; x <= x1; x++) {
            for (let r = r0; r <= r1; r++) grid[r * W + x] += share;
          }
        }
      }
      let max = 0;
      for (let i = 0; i < grid.length; i++) if (grid[i] > max) max = grid[i];
      const image = new ImageData(W, H);
      const px = image.data;
      const scale = max > 0 ? Math.log1p(max) : 1;
      for (let i = 0; i < grid.length; i++) {
        const v = grid[i];
        const o = i * 4;
        if (v <= 0) {
          px[o] = px[o + 1] = px[o + 2] = 255;
        } else {
          const [r, gr, b] = heatColour(0.15 + 0.85 * (Math.log1p(v) / scale));
          px[o] = r;
          px[o + 1] = gr;
          px[o + 2] = b;
        }
        px[o + 3] = 255;
      }
      return image;
    }

    indexAt(t) {
      return TimeChart.prototype.indexAt.call(this, t);
    }

    draw(view) {
      this.view = view;
      this.surface.resize();
      const g = this.surface.context();
      const plot = this.surface.plot();
      const range = this.yRange();
      const key = [this.dataVersion, view.from, view.to, range.hi, this.log, plot.w, plot.h,
        this.surface.ratio].join(" ");
      if (key !== this.imageKey) {
        this.image = this.build(plot, view, range);
        this.imageKey = key;
        this.range = range;
      }
      g.putImageData(this.image, Math.round(plot.x * this.surface.ratio),
        Math.round(plot.y * this.surface.ratio));
      drawTimeAxis(g, plot, view, false);
      // Latency axis.
      g.textAlign = "right";
      g.textBaseline = "middle";
      g.fillStyle = "#666";
      g.strokeStyle = "#bbb";
      const ticks = [];
      if (this.log) {
        for (let us = 1; us <= range.hi * 1.0001; us *= 10) ticks.push(us);
      } else {
        for (let i = 0; i <= 4; i++) ticks.push((range.hi * i) / 4);
      }
      for (const us of ticks) {
        const y = plot.y + plot.h - this.frac(us, range) * plot.h;
        g.fillText(micros(us), plot.x - 4, y);
        g.beginPath();
        g.moveTo(plot.x - 3, Math.round(y) + 0.5);
        g.lineTo(plot.x, Math.round(y) + 0.5);
        g.stroke();
      }
      g.strokeRect(plot.x + 0.5, plot.y + 0.5, plot.w - 1, plot.h - 1);
      drawEvents(g, plot, view);
      drawCursor(g, plot, view, this.selection);
    }

    // The counts under the mouse: the interval at its time, the buckets its pixel row
    // covers. Shown in the page's tooltip.
    hover(p, e) {
      const tip = this.options.tooltip;
      if (!p || !this.range) {
        tip.hide(this);
        return;
      }
      const plot = this.surface.plot();
      if (p.x < plot.x || p.x > plot.x + plot.w || p.y < plot.y || p.y > plot.y + plot.h) {
        tip.hide(this);
        return;
      }
      const view = this.view;
      const t = view.from + ((p.x - plot.x) / plot.w) * (view.to - view.from);
      const k = this.indexAt(t);
      const rowTop = Math.max(0, (plot.y + plot.h - Math.floor(p.y)) / plot.h);
      const rowBottom = Math.max(0, (plot.y + plot.h - Math.floor(p.y) - 1) / plot.h);
      const usHi = this.usAt(rowTop, this.range);
      const usLo = rowBottom <= 0 ? 0 : this.usAt(rowBottom, this.range);
      let count = 0;
      let lo = Infinity;
      let hi = 0;
      const c = k >= 0 && this.times[k] - this.step < t ? this.cells[k] || [] : [];
      for (let i = 0; i <= this.bounds.length; i++) {
        const [blo, bhi] = bucketBounds(this.bounds, i);
        if (bhi <= usLo || blo >= usHi) continue;
        lo = Math.min(lo, blo);
        hi = Math.max(hi, bhi);
      }
      for (let j = 0; j < c.length; j += 2) {
        const [blo, bhi] = bucketBounds(this.bounds, c[j]);
        if (bhi <= usLo || blo >= usHi) continue;
        count += c[j + 1];
      }
      const when = k >= 0 ? clock(this.times[k], true) + (this.step > 1 ? " (minute)" : "") : "–";
      tip.show(this, e, "<b>" + escapeHtml(this.options.title) + "</b><br>" + when +
        "<br>latency " + micros(lo) + " – " + micros(hi) + "<br>count <b>" + count + "</b>",
        { count, lo, hi, time: k >= 0 ? this.times[k] : null });
    }
  }

  // ---- miss-ratio curves ------------------------------------------------------------

  // Hit ratio against cache size, the size on a log axis: the "know your workload" curves.
  // setData() takes lines of [size bytes, hit ratio 0..1] points and marks, each
  // { label, bytes, color }, drawn as vertical lines (the current ARC, ARC + L2ARC).
  class CurveChart {
    constructor(parent, options) {
      this.options = options;
      this.box = document.createElement("div");
      this.box.className = "chart";
      const title = document.createElement("h3");
      title.textContent = options.title;
      this.box.appendChild(title);
      parent.appendChild(this.box);
      this.surface = new Surface(this.box, options.height || 200);
      this.legend = document.createElement("div");
      this.legend.className = "legend";
      this.box.appendChild(this.legend);
      this.lines = [];
      this.marks = [];
      this.cursorX = null;
      this.surface.canvas.addEventListener("mousemove", (e) => {
        const r = this.surface.canvas.getBoundingClientRect();
        this.cursorX = e.clientX - r.left;
        this.draw();
      });
      this.surface.canvas.addEventListener("mouseleave", () => {
        this.cursorX = null;
        this.draw();
      });
    }

    setData(lines, marks) {
      this.lines = lines.map((l, i) => ({ ...l, color: l.color || PALETTE[i % PALETTE.length] }));
      this.marks = marks;
    }

    range() {
      let lo = Infinity;
      let hi = 0;
      for (const l of this.lines) {
        for (const [x] of l.points) {
          if (x > 0) {
            lo = Math.min(lo, x);
            hi = Math.max(hi, x);
          }
        }
      }
      for (const m of this.marks) {
        if (m.bytes > 0) {
          lo = Math.min(lo, m.bytes);
          hi = Math.max(hi, m.bytes);
        }
      }
      if (!Number.isFinite(lo)) return [1 << 20, 1 << 30];
      return [lo, Math.max(hi, lo * 2)];
    }

    draw() {
      this.surface.resize();
      const g = this.surface.context();
      const plot = this.surface.plot();
      const [lo, hi] = this.range();
      const xOf = (b) => plot.x + (Math.log(b / lo) / Math.log(hi / lo)) * plot.w;
      const yOf = (r) => plot.y + plot.h - r * plot.h;
      g.textAlign = "right";
      g.textBaseline = "middle";
      for (let i = 0; i <= 4; i++) {
        const y = Math.round(yOf(i / 4)) + 0.5;
        g.strokeStyle = i === 0 ? "#bbb" : "#eee";
        g.beginPath();
        g.moveTo(plot.x, y);
        g.lineTo(plot.x + plot.w, y);
        g.stroke();
        g.fillStyle = "#666";
        g.fillText((i * 25) + "%", plot.x - 4, y);
      }
      // Size ticks at powers of four.
      g.textAlign = "center";
      g.textBaseline = "top";
      for (let b = 2 ** Math.ceil(Math.log2(lo)); b <= hi; b *= 4) {
        const x = xOf(b);
        g.strokeStyle = "#eee";
        g.beginPath();
        g.moveTo(x + 0.5, plot.y);
        g.lineTo(x + 0.5, plot.y + plot.h);
        g.stroke();
        g.fillStyle = "#666";
        g.fillText(axisValue(b, "bytes"), x, plot.y + plot.h + 4);
      }
      g.save();
      g.beginPath();
      g.rect(plot.x, plot.y, plot.w, plot.h);
      g.clip();
      for (const l of this.lines) {
        g.strokeStyle = l.color;
        g.lineWidth = 1.8;
        g.setLineDash(l.dashed ? [5, 3] : []);
        g.beginPath();
        l.points.forEach(([x, r], k) => {
          if (k === 0) g.moveTo(xOf(x), yOf(r));
          else g.lineTo(xOf(x), yOf(r));
        });
        g.stroke();
      }
      g.setLineDash([4, 3]);
      for (const m of this.marks) {
        const x = Math.round(xOf(m.bytes)) + 0.5;
        g.strokeStyle = m.color || "#444";
        g.beginPath();
        g.moveTo(x, plot.y);
        g.lineTo(x, plot.y + plot.h);
        g.stroke();
        g.fillStyle = g.strokeStyle;
        g.textAlign = "left";
        g.fillText(m.label, x + 3, plot.y + 2);
      }
      g.restore();
      // The legend: each line's hit ratio at the cursor's size, or at the largest mark.
      const at = this.cursorX !== null
        ? lo * Math.pow(hi / lo, Math.min(1, Math.max(0, (this.cursorX - plot.x) / plot.w)))
        : Math.max(0, ...this.marks.map((m) => m.bytes));
      const parts = this.lines.map((l) => {
        let r = null;
        for (const [x, y] of l.points) if (x <= at) r = y;
        return '<span><i style="background:' + l.color + '"></i>' + escapeHtml(l.label) +
          " <b>" + (r === null ? "–" : (100 * r).toFixed(1) + " %") + "</b></span>";
      });
      this.legend.innerHTML = "<span>at " + escapeHtml(value(at, "bytes")) + ":</span>" + parts.join("");
    }
  }

  return { TimeChart, HeatMap, CurveChart, value, micros, clock, elapsedClock, bucketBounds, escapeHtml,
    eventMarks, PALETTE };
})();
