// The Analytics page: the daemon's history (docs/analytics.md) as charts and heat maps,
// live, with the L2ARC switch, the tunables and a compare mode.
//
// The page asks the JSON API for the range shown (series and heat maps), then follows
// /api/v1/live, appending each new second while the view follows the newest one. Charts
// are declared from the catalog (what the pool has), so a pool with more volumes or
// devices gets more charts without code here knowing their names.
"use strict";

const { TimeChart, HeatMap, value: fmt, micros, clock, bucketBounds, escapeHtml, eventMarks } = Charts;

const $ = (sel) => document.querySelector(sel);

// ---- state --------------------------------------------------------------------------

const state = {
  catalog: null,
  defs: new Map(), // series id -> definition
  heatDefs: new Map(),
  volumes: [],
  caches: [], // { id: guid hex, name }
  logs: [],
  objectVolumes: [], // volumes on an object store (their object/ series)
  span: 900, // seconds shown
  end: null, // null: live (the view ends at the newest second), else a fixed time
  step: 1,
  times: [],
  values: new Map(), // series id -> array aligned with times
  heat: new Map(), // heat id -> { times, cells }
  bounds: [],
  events: [],
  zoomUs: 10000,
  log: false,
  readSources: { read_arc: true, read_l2: true, read_backing: true },
  cursor: null,
  payloadBytes: 0,
  lastLoadBytes: 0,
  samples: 0,
  newest: null,
  token: "",
  loading: 0,
  dataVersion: 0,
};

// What tests and curious users can ask the page (its own numbers, as drawn).
const inspect = {
  ready: false,
  samples: 0,
  renders: 0,
  chartsDrawn: 0,
  renderMs: 0,
  renderMsMax: 0,
  value: (id) => newestValue(id),
  // Operations in heat map `id` (or every heat map whose id starts with it) with a latency
  // overlapping [loUs, hiUs], over the data loaded.
  heatCount: (prefix, loUs, hiUs) => {
    let n = 0;
    for (const [id, h] of state.heat) {
      if (!id.startsWith(prefix)) continue;
      for (const c of h.cells) {
        for (let j = 0; j < c.length; j += 2) {
          const [lo, hi] = bucketBounds(state.bounds, c[j]);
          if (hi > loUs && lo < hiUs) n += c[j + 1];
        }
      }
    }
    return n;
  },
  chartsWithData: () => charts.filter((c) => c.hasData()).length,
  charts: () => charts.length,
  events: () => state.events.slice(),
};
window.larchPage = inspect;

// ---- the API ------------------------------------------------------------------------

async function api(path, init) {
  const answer = await fetch(path, init);
  const text = await answer.text();
  state.payloadBytes += text.length;
  state.lastLoadBytes += text.length;
  let body;
  try {
    body = JSON.parse(text);
  } catch (_) {
    body = { error: text };
  }
  if (!answer.ok) {
    const err = new Error(body.error || answer.statusText);
    err.status = answer.status;
    throw err;
  }
  return body;
}

function rangeQuery(from, to, step) {
  return "from=" + Math.floor(from) + "&to=" + Math.ceil(to) + "&step=" + step;
}

// A simulation's output held in the page (`larch sim run --html`), shown instead of a
// daemon's history: its times are seconds of virtual time from the start.
const STATIC = window.LARCH_STATIC || null;

// Where the data comes from: the daemon's JSON API, or the simulation in the page, each
// answering in the API's shapes (docs/analytics.md).
const source = STATIC ? staticSource(STATIC) : {
  catalog: () => api("/api/v1/catalog"),
  series: (ids, from, to, step) => api("/api/v1/series?ids=" + encodeURIComponent(ids.join(",")) +
    "&" + rangeQuery(from, to, step)),
  heatmap: (id, from, to, step) => api("/api/v1/heatmap?id=" + encodeURIComponent(id) + "&" +
    rangeQuery(from, to, step)),
};

function staticSource(d) {
  // The intervals that end within (from, to].
  const slice = (from, to) => {
    let a = 0;
    while (a < d.times.length && d.times[a] <= from) a++;
    let b = a;
    while (b < d.times.length && d.times[b] <= to) b++;
    return [a, b];
  };
  const events = (from, to) => d.events.filter((e) => e.time > from && e.time <= to);
  return {
    catalog: async () => ({
      version: 1, pool: d.pool, now: d.times[d.times.length - 1] || 0,
      series: d.series_defs, heatmaps: d.heatmap_defs, bytes: 0, max_bytes: 0,
    }),
    series: async (ids, from, to) => {
      const [a, b] = slice(from, to);
      const series = {};
      for (const id of ids) if (d.series[id]) series[id] = d.series[id].slice(a, b);
      return { version: 1, from, to, step: d.step, clipped: null, times: d.times.slice(a, b),
        series, events: events(from, to) };
    },
    heatmap: async (id, from, to) => {
      const [a, b] = slice(from, to);
      return { version: 1, id, from, to, step: d.step, clipped: null, bounds_us: d.bounds_us,
        times: d.times.slice(a, b), cells: (d.heatmaps[id] || []).slice(a, b),
        events: events(from, to) };
    },
  };
}

// ---- the catalog and the charts it gives ---------------------------------------------

function has(id) {
  return state.defs.has(id);
}

function unitOf(id) {
  const d = state.defs.get(id);
  return d ? d.unit : "";
}

// A line from one series, or a derived one from several (fn gets the index).
function line(id, label, extra) {
  return { ids: [id], label: label || (state.defs.get(id) || {}).label || id, ...extra };
}

function derived(ids, label, fn, extra) {
  return { ids, label, fn, ...extra };
}

function sumOf(ids, label, extra) {
  return derived(ids, label, (get) => {
    let s = null;
    for (const id of ids) {
      const v = get(id);
      if (v !== null) s = (s || 0) + v;
    }
    return s;
  }, extra);
}

// hits / (hits + misses), in percent; null when there was nothing to count.
function ratio(hitIds, missIds, label) {
  return derived(hitIds.concat(missIds), label, (get) => {
    let h = 0;
    let m = 0;
    let seen = false;
    for (const id of hitIds) {
      const v = get(id);
      if (v !== null) { h += v; seen = true; }
    }
    for (const id of missIds) {
      const v = get(id);
      if (v !== null) { m += v; seen = true; }
    }
    return seen && h + m > 0 ? (100 * h) / (h + m) : null;
  });
}

// The sections and their charts, from what the pool has.
function layout() {
  const V = state.volumes;
  const C = state.caches;
  const L = state.logs;
  const each = (list, f) => list.flatMap(f);
  const sections = [];

  sections.push({
    title: "Clients (NBD)",
    charts: [
      ...each(V, (v) => [{
        title: v + ": operations", unit: "ops/s",
        lines: [line(`volume/${v}/read_ops`, "reads"), line(`volume/${v}/write_ops`, "writes")],
      }, {
        title: v + ": bandwidth", unit: "bytes/s",
        lines: [line(`volume/${v}/read_bytes`, "read"), line(`volume/${v}/write_bytes`, "written")],
      }]),
      {
        title: "Client reads by where they were served", unit: "ops/s", stacked: true,
        lines: [
          sumOf(V.map((v) => `volume/${v}/read_arc_ops`), "ARC (DRAM)", { color: "#2e9e5b" }),
          sumOf(V.map((v) => `volume/${v}/read_l2_ops`), "cache devices", { color: "#1f5fa8" }),
          sumOf(V.map((v) => `volume/${v}/read_backing_ops`), "backing stores", { color: "#b8333a" }),
        ],
      },
    ],
  });

  sections.push({
    title: "Latency at the front end",
    note: "Client requests, timed from arrival to reply. Reads can be shown by where they " +
      "were served: the ARC alone is the dark stripe at the bottom.",
    sources: true,
    heats: each(V, (v) => [
      { title: v + ": reads", ids: ["read_arc", "read_l2", "read_backing"].map((q) => `frontend/${v}/${q}`), reads: true },
      { title: v + ": writes", ids: [`frontend/${v}/write`] },
    ]),
  });

  sections.push({
    title: "Hit rates",
    charts: [
      {
        title: "Hit ratio", unit: "%", max: 100,
        lines: [ratio(["arc/hits"], ["arc/misses"], "ARC"),
          ratio(["arc/l2_hits"], ["arc/l2_misses"], "L2ARC")],
      },
      {
        title: "Hits and misses", unit: "ops/s",
        lines: [line("arc/hits", "ARC hits"), line("arc/l2_hits", "L2ARC hits"),
          line("arc/misses", "ARC misses"), line("arc/l2_misses", "L2ARC misses")],
      },
    ],
  });

  sections.push({
    title: "L2ARC warm-up",
    charts: [
      {
        title: "L2ARC size", unit: "bytes",
        lines: [line("arc/l2_size", "logical"), line("arc/l2_asize", "on the devices")],
      },
      {
        title: "Blocks on each cache device", unit: "blocks", stacked: true,
        lines: C.map((c) => line(`cache/${c.id}/blocks`, c.name)),
      },
      {
        title: "Feed", unit: "bytes/s",
        lines: [line("arc/l2_write_bytes", "written"),
          line("arc/l2_wasted_feed_bytes", "wasted (overwritten unread)")],
      },
      {
        title: "L2ARC evictions", unit: "blocks/s",
        lines: [line("arc/l2_evicted", "overwritten by the evict hand")],
      },
      {
        title: "Backing-store reads (what warms the caches)", unit: "bytes/s",
        lines: V.map((v) => line(`backing/${v}/read_bytes`, v)),
      },
    ],
  });

  sections.push({
    title: "ARC",
    charts: [
      {
        title: "ARC size and target", unit: "bytes",
        lines: [line("arc/size", "size"), line("arc/c", "target c"), line("arc/c_max", "c_max", { dashed: true })],
      },
      {
        title: "MRU, MFU and their ghosts", unit: "bytes",
        lines: [line("arc/mru_size", "MRU"), line("arc/mfu_size", "MFU"),
          line("arc/mru_ghost_size", "MRU ghost", { dashed: true }),
          line("arc/mfu_ghost_size", "MFU ghost", { dashed: true })],
      },
    ],
  });

  const deviceOps = [
    ...V.map((v) => sumOf([`backing/${v}/read_ops`, `backing/${v}/write_ops`], v + " (backing)", { group: "backing stores" })),
    ...C.map((c) => sumOf([`cache/${c.id}/read_ops`, `cache/${c.id}/write_ops`], c.name + " (cache)", { group: "cache devices" })),
    ...L.map((l) => line(`log/${l.id}/commits`, l.name + " (log)", { group: "log devices" })),
  ];
  sections.push({
    title: "Devices",
    charts: [{ title: "Operations by device", unit: "ops/s", stacked: true, lines: deviceOps, breakdown: true }],
    heats: [
      ...each(V, (v) => ["read", "write", "flush"].map((q) => ({ title: `${v} backing store: ${q}s`, ids: [`backing/${v}/${q}`] }))),
      ...each(C, (c) => [{ title: `${c.name} (cache): reads`, ids: [`cache/${c.id}/read`] },
        { title: `${c.name} (cache): feed writes`, ids: [`cache/${c.id}/write`] }]),
      ...L.map((l) => ({ title: `${l.name} (log): commits`, ids: [`log/${l.id}/write`] })),
    ],
  });

  const O = state.objectVolumes;
  if (O.length > 0) {
    sections.push({
      title: "Object stores",
      note: "Volumes on an object store: the requests larch makes of it, the bytes they " +
        "carry (uploaded against committed: write amplification, repacks included), and " +
        "the space the volume's segments take on the store against what is live in them.",
      charts: [
        ...each(O, (v) => [{
          title: v + ": requests", unit: "ops/s",
          lines: [line(`object/${v}/gets`, "GETs"), line(`object/${v}/puts`, "PUTs"),
            line(`object/${v}/deletes`, "DELETEs")],
        }, {
          title: v + ": bytes", unit: "bytes/s",
          lines: [line(`object/${v}/get_bytes`, "fetched"), line(`object/${v}/put_bytes`, "uploaded"),
            line(`object/${v}/committed_bytes`, "committed", { dashed: true }),
            line(`object/${v}/repack_bytes`, "repacked")],
        }, {
          title: v + ": space on the store", unit: "bytes",
          lines: [line(`object/${v}/stored_bytes`, "stored"),
            line(`object/${v}/live_bytes`, "live", { dashed: true })],
        }, {
          title: v + ": live share of the stored bytes", unit: "%", max: 100,
          lines: [derived([`object/${v}/live_bytes`, `object/${v}/stored_bytes`], "live / stored", (get) => {
            const live = get(`object/${v}/live_bytes`);
            const stored = get(`object/${v}/stored_bytes`);
            return live !== null && stored ? (100 * live) / stored : null;
          })],
        }]),
      ],
    });
  }

  sections.push({
    title: "Memory and writes",
    charts: [
      {
        title: "DRAM for headers and the L2 index", unit: "bytes",
        lines: [line("arc/hdr_size", "ARC headers"), line("arc/l2_hdr_size", "L2 index"),
          line("recorder/bytes", "this history", { dashed: true })],
      },
      {
        title: "Dirty data", unit: "bytes",
        lines: [line("arc/dirty_bytes", "dirty"), line("arc/dirty_data_max", "limit", { dashed: true })],
      },
      {
        title: "TXG syncs and intent-log commits", unit: "per second",
        lines: [line("arc/txg_syncs", "TXG syncs"), line("arc/zil_commit_count", "ZIL commits")],
      },
    ],
  });
  return sections;
}

// ---- building the page ----------------------------------------------------------------

let charts = []; // { chart, spec, kind, hasData() }
let tooltipOwner = null;

const tooltip = {
  el: null,
  last: null,
  show(owner, e, html, data) {
    tooltipOwner = owner;
    this.last = data;
    const el = this.el || (this.el = $("#tooltip"));
    el.innerHTML = html;
    el.hidden = false;
    el.style.left = Math.min(window.innerWidth - 220, e.pageX + 14) + "px";
    el.style.top = e.pageY + 14 + "px";
  },
  hide(owner) {
    if (tooltipOwner !== owner) return;
    const el = this.el || (this.el = $("#tooltip"));
    el.hidden = true;
    this.last = null;
  },
};
inspect.tooltip = () => tooltip.last;
// Where chart `index` (in page order) marks the events of its view, as last drawn: each
// event, its short label, and its line's place on the page (x, from top to bottom).
inspect.eventMarks = (index) => charts[index]
  ? eventMarks(charts[index].chart).map((m) => ({
    kind: m.event.kind, text: m.event.text, label: m.label, time: m.event.time,
    x: m.pageX, top: m.pageTop, bottom: m.pageBottom,
  }))
  : [];

const hooks = {
  cursor: (t) => {
    state.cursor = t;
    scheduleDraw();
  },
  select: (from, to) => onSelect(from, to),
};

function build() {
  const main = $("#sections");
  onScreen.disconnect();
  main.replaceChildren();
  charts = [];
  for (const section of layout()) {
    const el = document.createElement("section");
    el.className = "section";
    const h = document.createElement("h2");
    h.textContent = section.title;
    el.appendChild(h);
    if (section.note) {
      const p = document.createElement("p");
      p.className = "hint";
      p.textContent = section.note;
      el.appendChild(p);
    }
    if (section.sources) el.appendChild(sourceToggles());
    const grid = document.createElement("div");
    grid.className = "grid";
    el.appendChild(grid);
    for (const spec of section.charts || []) {
      const lines = spec.lines.filter((l) => l.ids.some(has));
      if (lines.length === 0) continue;
      const chart = new TimeChart(grid, { ...spec, hooks, tooltip });
      const entry = { chart, spec: { ...spec, lines }, kind: "time", values: [] };
      onScreen.observe(chart.box);
      entry.hasData = () => entry.values.some((vs) => vs.some((v) => v !== null && v > 0));
      if (spec.breakdown) {
        entry.breakdown = document.createElement("div");
        entry.breakdown.className = "breakdown";
        chart.box.appendChild(entry.breakdown);
      }
      charts.push(entry);
    }
    for (const spec of section.heats || []) {
      const ids = spec.ids.filter((id) => state.heatDefs.has(id));
      if (ids.length === 0) continue;
      const chart = new HeatMap(grid, { title: spec.title, hooks, tooltip });
      const entry = { chart, spec: { ...spec, ids }, kind: "heat" };
      onScreen.observe(chart.box);
      entry.hasData = () => {
        for (const id of entry.shownIds()) {
          const h = state.heat.get(id);
          if (h && h.cells.some((c) => c.length > 0)) return true;
        }
        return false;
      };
      entry.shownIds = () => spec.reads
        ? ids.filter((id) => state.readSources[id.slice(id.lastIndexOf("/") + 1)]) : ids;
      charts.push(entry);
    }
    main.appendChild(el);
  }
  if (!STATIC) main.appendChild(advisePanel());
}

// ---- know your workload ------------------------------------------------------------------

let adviceChart = null;

// The panel of /api/v1/advise: the pool's miss-ratio curves with its caches marked, what a
// bigger ARC or L2ARC would buy, and the advice (docs/mrc.md).
function advisePanel() {
  const el = document.createElement("section");
  el.className = "section";
  el.id = "advise";
  el.innerHTML = "<h2>Know your workload</h2><p class=\"hint\">Hit ratio against cache size, " +
    "from a sample of the pool's accesses (miniature ARCs, and LRU from reuse distances); " +
    "the lines mark today's ARC and ARC + L2ARC. <code>larch advise</code> says the same.</p>";
  const grid = document.createElement("div");
  grid.className = "grid";
  el.appendChild(grid);
  adviceChart = new Charts.CurveChart(grid, { title: "Hit ratio by cache size", height: 220 });
  const text = document.createElement("div");
  text.className = "chart advice";
  text.id = "advice-text";
  grid.appendChild(text);
  return el;
}

// A length of time, as a person would say it.
function duration(s) {
  if (s < 120) return Math.round(s) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " days";
}

async function loadAdvice() {
  if (STATIC || !adviceChart) return;
  const a = await api("/api/v1/advise");
  const c = a.curves;
  adviceChart.setData([
    { label: "ARC", points: c.arc, color: "#1f5fa8" },
    { label: "LRU", points: c.lru, color: "#d9822b", dashed: true },
  ], [
    { label: "ARC", bytes: a.today.arc_bytes, color: "#2e9e5b" },
    ...(a.today.l2_bytes > 0
      ? [{ label: "ARC + L2ARC", bytes: a.today.arc_bytes + a.today.l2_bytes, color: "#b8333a" }] : []),
  ]);
  adviceChart.draw();
  const ad = a;
  let html = "<h3>What would help</h3>";
  if (ad.too_young) html += "<p>" + escapeHtml(ad.too_young) + "</p>";
  html += "<ul>" + ad.lines.map((l) => "<li>" + escapeHtml(l) + "</li>").join("") + "</ul>";
  const us = (x) => (x === null || x === undefined ? "–" : micros(x));
  html += '<table class="cmp"><thead><tr><th>ARC</th><th>L2ARC</th><th>ARC hits</th><th>L2 hits</th>' +
    "<th>misses served</th><th>reads/s</th><th>latency</th><th>warm in ≥</th><th>index DRAM</th></tr></thead><tbody>";
  const rows = [[ad.current, "today"]].concat(ad.what_if.map((p) => [p, ""]));
  for (const [p, label] of rows) {
    html += "<tr" + (label ? ' class="today" title="today"' : "") + "><td>" + fmt(p.arc_bytes, "bytes") + "</td><td>" + fmt(p.l2_bytes, "bytes") +
      "</td><td>" + fmt(100 * p.arc_hit_ratio, "%") + "</td><td>" + fmt(100 * p.l2_hit_ratio, "%") +
      "</td><td>" + fmt(100 * p.misses_served, "%") + "</td><td>" +
      (p.read_iops === null ? "–" : fmt(p.read_iops, "")) + "</td><td>" + us(p.read_us) +
      "</td><td>" + (p.warm_s === null ? "–" : duration(p.warm_s)) + "</td><td>" +
      fmt(p.l2_index_bytes, "bytes") + "</td></tr>";
  }
  html += "</tbody></table>";
  if (ad.volumes && ad.volumes.length) {
    html += '<table class="cmp"><thead><tr><th>volume</th><th>accesses</th><th>ARC hits</th>' +
      "<th>ARC + L2 hits</th><th>working set 1 h</th><th>writes</th><th>sequential</th></tr></thead><tbody>";
    for (const v of ad.volumes) {
      const hour = (v.curves.working_set.find((w) => w[0] === 3600) || [0, 0])[1];
      html += "<tr><td>" + escapeHtml(v.name) + "</td><td>" + fmt(100 * v.share_of_pool, "%") + "</td><td>" +
        fmt(100 * v.arc_hit_ratio, "%") + "</td><td>" + fmt(100 * v.arc_l2_hit_ratio, "%") + "</td><td>" +
        fmt(hour, "bytes") + "</td><td>" + fmt(100 * v.curves.write_share, "%") + "</td><td>" +
        fmt(100 * v.curves.sequential_share, "%") + "</td></tr>";
    }
    html += "</tbody></table>";
  }
  html += "<p class=\"hint\">first row: today. Sampled " + c.sampled + " accesses at " +
    (100 * c.rate).toPrecision(2) + "% (" + fmt(c.memory_bytes, "bytes") + " held)</p>";
  $("#advice-text").innerHTML = html;
  inspect.advice = a;
}
inspect.reloadAdvice = () => loadAdvice();

function sourceToggles() {
  const box = document.createElement("div");
  box.className = "sources";
  const names = { read_arc: "ARC (DRAM)", read_l2: "cache devices", read_backing: "backing store" };
  box.append("reads served from: ");
  for (const [key, label] of Object.entries(names)) {
    const l = document.createElement("label");
    const input = document.createElement("input");
    input.type = "checkbox";
    input.checked = state.readSources[key];
    input.dataset.source = key;
    input.addEventListener("change", () => {
      state.readSources[key] = input.checked;
      refreshData();
      scheduleDraw();
    });
    l.append(input, " " + label);
    box.appendChild(l);
  }
  return box;
}

// ---- data -------------------------------------------------------------------------------

function seriesIds() {
  const ids = new Set(["pool/l2arc_enabled", "arc/hits", "arc/misses", "arc/l2_hits",
    "arc/l2_misses", "arc/size", "arc/l2_size", "arc/hdr_size", "arc/l2_hdr_size", "recorder/bytes"]);
  for (const e of charts) {
    if (e.kind === "time") for (const l of e.spec.lines) for (const id of l.ids) ids.add(id);
  }
  for (const v of state.volumes) {
    for (const q of ["read_ops", "write_ops", "read_arc_ops", "read_l2_ops", "read_backing_ops"]) {
      ids.add(`volume/${v}/${q}`);
    }
  }
  return [...ids].filter(has);
}

function heatIds() {
  const ids = new Set();
  for (const e of charts) if (e.kind === "heat") for (const id of e.spec.ids) ids.add(id);
  return [...ids];
}

function viewEnd() {
  if (state.end !== null) return state.end;
  return state.newest !== null ? state.newest : Math.floor(Date.now() / 1000);
}

// Loads the range shown. In live mode the range ends now and is then extended by the
// live feed.
async function load() {
  const to = viewEnd();
  const from = to - state.span;
  const step = state.span > 3600 ? 60 : 1;
  const token = ++state.loading;
  state.lastLoadBytes = 0;
  const until = state.end === null ? to + 1 : to;
  const series = await source.series(seriesIds(), from, until, step);
  const heats = await Promise.all(heatIds().map((id) => source.heatmap(id, from, until, step)));
  if (token !== state.loading) return; // a newer load was started meanwhile
  state.step = series.step;
  state.times = series.times.slice();
  state.values = new Map(Object.entries(series.series).map(([id, vs]) => [id, vs.slice()]));
  state.heat = new Map();
  for (const h of heats) {
    state.heat.set(h.id, { times: h.times.slice(), cells: h.cells.map((c) => c.slice()) });
    state.bounds = h.bounds_us;
  }
  state.events = mergeEvents(series.events, []);
  if (state.times.length) state.newest = Math.max(state.newest || 0, state.times[state.times.length - 1]);
  state.clipped = series.clipped;
  refreshData();
  inspect.ready = true;
  scheduleDraw();
}

function mergeEvents(a, b) {
  const seen = new Set();
  const out = [];
  for (const e of a.concat(b)) {
    const key = e.time + " " + e.kind + " " + e.text;
    if (!seen.has(key)) { seen.add(key); out.push(e); }
  }
  return out.sort((x, y) => x.time - y.time);
}

// One new second from the live feed.
function onSample(sample) {
  state.samples++;
  inspect.samples = state.samples;
  state.newest = Math.max(state.newest || 0, sample.time);
  state.latest = sample;
  if (sample.events && sample.events.length) {
    state.events = mergeEvents(state.events, sample.events);
    if (sample.events.some((e) => e.kind === "tunable" || e.kind === "switch")) loadTunables();
  }
  showNow(sample);
  if (Object.keys(sample.values).some((id) => !state.defs.has(id))) {
    // A device or volume was added: charts for it need the new catalog.
    readCatalog().then(() => { build(); return load(); }).catch(showError);
    return;
  }
  if (state.end !== null || state.step !== 1) {
    // A fixed range does not move; a minute view reloads when a minute has passed.
    if (state.end === null && sample.time % 60 === 0) load().catch(showError);
    return;
  }
  const last = state.times.length ? state.times[state.times.length - 1] : null;
  if (last !== null && sample.time <= last) return;
  if (last !== null && sample.time > last + 1) {
    // Seconds missed (the daemon was stopped, or this page fell behind): a gap.
    pushInterval(sample.time - 1, null);
  }
  pushInterval(sample.time, sample);
  // Keep what the range shows, and a little more.
  const oldest = sample.time - state.span - 5;
  let drop = 0;
  while (drop < state.times.length && state.times[drop] < oldest) drop++;
  if (drop > 0) {
    state.times.splice(0, drop);
    for (const vs of state.values.values()) vs.splice(0, drop);
    for (const h of state.heat.values()) {
      let d = 0;
      while (d < h.times.length && h.times[d] < oldest) d++;
      h.times.splice(0, d);
      h.cells.splice(0, d);
    }
  }
  refreshData();
  scheduleDraw();
}

function pushInterval(time, sample) {
  state.times.push(time);
  for (const [id, vs] of state.values) {
    const v = sample ? sample.values[id] : undefined;
    vs.push(v === undefined ? null : v);
  }
  for (const [id, h] of state.heat) {
    h.times.push(time);
    h.cells.push(sample && sample.heat[id] ? sample.heat[id] : []);
  }
}

// Hands each chart its lines (derived ones computed once per change, not per frame).
function refreshData() {
  state.dataVersion++;
  const get = (k) => (id) => {
    const vs = state.values.get(id);
    return vs && vs[k] !== undefined ? vs[k] : null;
  };
  for (const e of charts) {
    if (e.kind === "time") {
      const lines = e.spec.lines.map((l) => {
        let values;
        if (!l.fn) values = state.values.get(l.ids[0]) || state.times.map(() => null);
        else values = state.times.map((_, k) => l.fn(get(k)));
        return { label: l.label, color: l.color, dashed: l.dashed, values, group: l.group };
      });
      e.values = lines.map((l) => l.values);
      e.chart.setData(state.times, state.step, lines);
    } else {
      const ids = e.shownIds();
      const first = state.heat.get(ids[0]);
      const times = first ? first.times : [];
      const cells = times.map((_, k) => {
        if (ids.length === 1) return first.cells[k] || [];
        const merged = new Map();
        for (const id of ids) {
          const c = (state.heat.get(id) || { cells: [] }).cells[k] || [];
          for (let j = 0; j < c.length; j += 2) merged.set(c[j], (merged.get(c[j]) || 0) + c[j + 1]);
        }
        return [...merged.entries()].sort((a, b) => a[0] - b[0]).flat();
      });
      e.chart.setData(times, state.step, state.bounds, cells);
      e.chart.setScale(state.zoomUs, state.log);
    }
  }
}

// ---- drawing ----------------------------------------------------------------------------

let drawPending = false;

function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    drawAll();
  });
}

function currentView() {
  const to = viewEnd();
  return { from: to - state.span, to, cursor: state.cursor, events: state.events };
}

// Charts on screen (or about to be): the others are drawn when they scroll into view. A
// browser without a GPU repaints every canvas drawn into, so drawing only what is seen and
// has changed is what keeps the page responsive at a 100 ms refresh.
const onScreen = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const e = charts.find((c) => c.chart.box === entry.target);
    if (e) e.visible = entry.isIntersecting;
  }
  scheduleDraw();
}, { rootMargin: "300px" });

// Draws every visible chart whose view, data, cursor, scale or size changed since it was
// last drawn.
function drawAll() {
  const started = performance.now();
  const view = currentView();
  const key = [view.from, view.to, view.cursor, state.dataVersion, state.zoomUs, state.log,
    view.events.length, window.innerWidth].join(" ");
  let drawn = 0;
  for (const e of charts) {
    if (!e.visible || e.drawnKey === key) continue;
    if (e.kind === "heat") e.chart.setScale(state.zoomUs, state.log);
    e.chart.draw(view);
    if (e.breakdown) drawBreakdown(e, view);
    e.drawnKey = key;
    drawn++;
  }
  const ms = performance.now() - started;
  inspect.chartsDrawn += drawn;
  inspect.renders++;
  inspect.renderMs = ms;
  inspect.renderMsMax = Math.max(inspect.renderMsMax, ms);
  $("#range-text").textContent = (state.end === null ? "live · " : "") +
    clock(view.from, true) + " – " + clock(view.to, true) +
    (state.step > 1 ? " · 1-minute steps" : " · 1-second steps") +
    (state.clipped ? " · clipped: " + state.clipped : "");
  showFoot();
}

// The breakdown of a stacked chart's range: each group's share, then each line's.
function drawBreakdown(e, view) {
  const totals = new Map();
  let all = 0;
  for (let i = 0; i < e.spec.lines.length; i++) {
    let s = 0;
    const vs = e.values[i];
    for (let k = 0; k < state.times.length; k++) {
      if (state.times[k] <= view.from || state.times[k] > view.to) continue;
      if (vs[k] !== null) s += vs[k];
    }
    const l = e.spec.lines[i];
    const g = totals.get(l.group) || { sum: 0, parts: [] };
    g.sum += s;
    g.parts.push({ label: l.label, sum: s, color: e.chart.lines[i].color });
    totals.set(l.group, g);
    all += s;
  }
  let html = "<b>pool</b> " + fmt(all * state.step, "ops") + " in the range";
  for (const [group, g] of totals) {
    const pct = all > 0 ? (100 * g.sum) / all : 0;
    html += '<div class="bar-row"><span class="bar-label">' + escapeHtml(group) + " " +
      pct.toFixed(1) + ' %</span><span class="bar">';
    for (const p of g.parts) {
      const w = all > 0 ? (100 * p.sum) / all : 0;
      html += '<i style="width:' + w.toFixed(2) + "%;background:" + p.color + '" title="' +
        escapeHtml(p.label) + ": " + (all > 0 ? ((100 * p.sum) / all).toFixed(1) : "0") + ' %"></i>';
    }
    html += "</span></div>";
  }
  if (html !== e.breakdownHtml) {
    e.breakdown.innerHTML = html;
    e.breakdownHtml = html;
  }
}

function newestValue(id) {
  if (state.latest && state.latest.values[id] !== undefined) return state.latest.values[id];
  const vs = state.values.get(id);
  if (!vs) return null;
  for (let k = vs.length - 1; k >= 0; k--) if (vs[k] !== null) return vs[k];
  return null;
}

// The strip of the newest second's key figures.
function showNow(sample) {
  const v = (id) => (sample.values[id] === undefined ? null : sample.values[id]);
  const sum = (q) => state.volumes.reduce((s, vol) => s + (v(`volume/${vol}/${q}`) || 0), 0);
  const rate = (h, m) => (h + m > 0 ? (100 * h) / (h + m) : null);
  const figures = [
    ["now-read-ops", "client reads", sum("read_ops"), "ops/s"],
    ["now-write-ops", "client writes", sum("write_ops"), "ops/s"],
    ["now-arc-hits", "ARC hits", v("arc/hits"), "ops/s"],
    ["now-l2-hits", "L2ARC hits", v("arc/l2_hits"), "ops/s"],
    ["now-arc-ratio", "ARC hit ratio", rate(v("arc/hits") || 0, v("arc/misses") || 0), "%"],
    ["now-l2-ratio", "L2ARC hit ratio", rate(v("arc/l2_hits") || 0, v("arc/l2_misses") || 0), "%"],
    ["now-arc-size", "ARC size", v("arc/size"), "bytes"],
    ["now-l2-size", "L2ARC size", v("arc/l2_size"), "bytes"],
    ["now-headers", "header DRAM", (v("arc/hdr_size") || 0) + (v("arc/l2_hdr_size") || 0), "bytes"],
  ];
  const box = $("#now");
  if (box.children.length !== figures.length) {
    box.replaceChildren(...figures.map(([id, label]) => {
      const d = document.createElement("div");
      d.innerHTML = '<span class="label">' + label + '</span><span class="figure" id="' + id + '"></span>';
      return d;
    }));
  }
  for (const [id, , x, unit] of figures) {
    const el = document.getElementById(id);
    el.textContent = fmt(x, unit);
    el.dataset.value = x === null ? "" : String(x);
  }
  const sw = v("pool/l2arc_enabled");
  const button = $("#l2switch");
  if (sw !== null && !button.classList.contains("pending")) {
    button.dataset.state = sw ? "on" : "off";
    button.querySelector("b").textContent = sw ? "on" : "off";
  }
  $("#conn").textContent = "live · " + clock(sample.time, true);
  $("#conn").className = "conn live";
}

function showFoot() {
  const cat = state.catalog;
  const bytes = newestValue("recorder/bytes");
  $("#foot").textContent = "history " + fmt(bytes === null && cat ? cat.bytes : bytes, "bytes") +
    (cat ? " of " + fmt(cat.max_bytes, "bytes") : "") +
    " · this view loaded " + fmt(state.lastLoadBytes, "bytes") +
    " · drawn in " + inspect.renderMs.toFixed(1) + " ms";
}

function showError(err) {
  const el = $("#conn");
  el.textContent = String(err.message || err);
  el.className = "conn error";
}

// ---- controls -----------------------------------------------------------------------------

function setActive(groupSel, attr, valueNow) {
  for (const b of document.querySelectorAll(groupSel + " button")) {
    b.classList.toggle("active", b.dataset[attr] === String(valueNow));
  }
}

function onSelect(from, to) {
  const mode = document.querySelector('input[name="cmp-drag"]:checked');
  if (mode && mode.value && !$("#compare").hidden) {
    setInput("#cmp-" + mode.value + "-from", from);
    setInput("#cmp-" + mode.value + "-to", to);
    return;
  }
  // Zoom into the selection.
  state.span = Math.max(30, Math.round(to - from));
  state.end = Math.round(to);
  $("#live").classList.remove("active");
  setActive("#spans", "span", -1);
  load().catch(showError);
}

function pan(direction) {
  const end = viewEnd() + (direction * state.span) / 2;
  const newest = state.newest || Math.floor(Date.now() / 1000);
  if (end >= newest) {
    goLive();
    return;
  }
  state.end = Math.round(end);
  $("#live").classList.remove("active");
  load().catch(showError);
}

function goLive() {
  state.end = null;
  $("#live").classList.add("active");
  load().catch(showError);
}

let refreshTimer = null;

function setRefresh(ms) {
  if (refreshTimer) clearInterval(refreshTimer);
  refreshTimer = ms > 0 ? setInterval(drawAll, ms) : null;
}

function download(format) {
  if (STATIC) {
    downloadShown(format).catch(showError);
    return;
  }
  const to = viewEnd();
  const q = rangeQuery(to - state.span, to, state.step);
  const url = "/api/v1/export?ids=" + encodeURIComponent(seriesIds().join(",")) + "&" + q +
    "&format=" + format;
  const a = document.createElement("a");
  a.href = url;
  a.download = "larch-analytics." + format;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

// The series shown, as a file made in the page (a simulation's report has no daemon to
// ask): CSV with a time column, or the API's JSON.
async function downloadShown(format) {
  const to = viewEnd();
  const answer = await source.series(seriesIds(), to - state.span, to, state.step);
  let text;
  if (format === "csv") {
    const ids = Object.keys(answer.series);
    const rows = [["time"].concat(ids).join(",")];
    answer.times.forEach((t, k) => {
      rows.push([t].concat(ids.map((id) => {
        const v = answer.series[id][k];
        return v === null || v === undefined ? "" : v;
      })).join(","));
    });
    text = rows.join("\n") + "\n";
  } else {
    text = JSON.stringify(answer);
  }
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type: format === "csv" ? "text/csv" : "application/json" }));
  a.download = "larch-simulation." + format;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

function wireControls() {
  for (const b of document.querySelectorAll("#spans button")) {
    b.addEventListener("click", () => {
      state.span = Number(b.dataset.span);
      setActive("#spans", "span", state.span);
      load().catch(showError);
    });
  }
  for (const b of document.querySelectorAll("#zooms button")) {
    b.addEventListener("click", () => {
      state.zoomUs = Number(b.dataset.zoom) || 0;
      setActive("#zooms", "zoom", state.zoomUs);
      scheduleDraw();
    });
  }
  $("#logaxis").addEventListener("change", (e) => {
    state.log = e.target.checked;
    scheduleDraw();
  });
  $("#pan-back").addEventListener("click", () => pan(-1));
  $("#pan-fwd").addEventListener("click", () => pan(1));
  $("#live").addEventListener("click", goLive);
  $("#refresh").addEventListener("change", (e) => setRefresh(Number(e.target.value)));
  $("#download-csv").addEventListener("click", () => download("csv"));
  $("#download-json").addEventListener("click", () => download("json"));
  $("#l2switch").addEventListener("click", flipSwitch);
  $("#compare-open").addEventListener("click", openCompare);
  $("#compare-close").addEventListener("click", () => { $("#compare").hidden = true; });
  $("#cmp-flip").addEventListener("click", aroundLastChange);
  $("#cmp-run").addEventListener("click", () => runCompare().catch((err) => {
    $("#cmp-out").textContent = "compare failed: " + err.message;
  }));
  $("#token").addEventListener("change", (e) => {
    state.token = e.target.value.trim();
    sessionStorage.setItem("larch-token", state.token);
  });
  window.addEventListener("resize", scheduleDraw);
  setActive("#spans", "span", state.span);
  setActive("#zooms", "zoom", state.zoomUs);
  $("#live").classList.add("active");
}

// ---- the switch and the tunables ----------------------------------------------------------

async function setTunable(name, text) {
  return api("/api/v1/tunables", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Larch-Token": state.token },
    body: JSON.stringify({ name, value: String(text) }),
  });
}

async function flipSwitch() {
  const button = $("#l2switch");
  const on = button.dataset.state !== "off";
  button.classList.add("pending");
  try {
    const answer = await setTunable("l2arc_enabled", on ? "0" : "1");
    button.dataset.state = answer.value ? "on" : "off";
    button.querySelector("b").textContent = answer.value ? "on" : "off";
    $("#tunable-result").textContent = "l2arc_enabled=" + answer.text;
  } catch (err) {
    $("#tunable-result").textContent = "the switch needs the token: " + err.message;
    $("#token").focus();
  } finally {
    button.classList.remove("pending");
  }
}

async function loadTunables() {
  const answer = await api("/api/v1/tunables");
  const body = $("#tunables tbody");
  body.replaceChildren(...answer.tunables.map((t) => {
    const row = document.createElement("tr");
    row.innerHTML = "<td><code>" + escapeHtml(t.name) + "</code></td>" +
      '<td><input size="10"></td><td>' + escapeHtml(t.default) + "</td>" +
      "<td><button>set</button></td><td>" + escapeHtml(t.help) + "</td>";
    const input = row.querySelector("input");
    input.value = t.text;
    input.dataset.tunable = t.name;
    row.querySelector("button").addEventListener("click", async () => {
      try {
        const done = await setTunable(t.name, input.value.trim());
        input.value = done.text;
        $("#tunable-result").textContent = t.name + "=" + done.text;
      } catch (err) {
        $("#tunable-result").textContent = t.name + ": " + err.message;
      }
    });
    return row;
  }));
}

// ---- compare mode ---------------------------------------------------------------------------

function setInput(sel, t) {
  const d = new Date(Math.round(t) * 1000);
  const p = (n) => String(n).padStart(2, "0");
  $(sel).value = d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + "T" +
    p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
}

function getInput(sel) {
  const t = new Date($(sel).value).getTime();
  if (!Number.isFinite(t)) throw new Error("a time is missing in " + sel.replace("#cmp-", ""));
  return Math.round(t / 1000);
}

function openCompare() {
  $("#compare").hidden = false;
  if (!$("#cmp-a-from").value) aroundLastChange();
  $("#compare").scrollIntoView({ behavior: "smooth" });
}

// A before and B after the newest event in the view, each as long as possible up to half
// the view; without an event, the view's halves.
function aroundLastChange() {
  const view = currentView();
  const changes = state.events.filter((e) => e.kind !== "restart" && e.time > view.from && e.time <= view.to);
  let a0, a1, b0, b1;
  if (changes.length) {
    const t = changes[changes.length - 1].time;
    const before = changes.length > 1 ? changes[changes.length - 2].time : view.from;
    const w = Math.max(10, Math.min(t - before, view.to - t, state.span / 2));
    [a0, a1, b0, b1] = [t - w, t, t, t + w];
  } else {
    const mid = (view.from + view.to) / 2;
    [a0, a1, b0, b1] = [view.from, mid, mid, view.to];
  }
  setInput("#cmp-a-from", a0);
  setInput("#cmp-a-to", a1);
  setInput("#cmp-b-from", b0);
  setInput("#cmp-b-to", b1);
}

// Percentiles of a histogram given as a Map bucket -> count: the upper bound of the
// bucket where the cumulative count reaches each fraction.
function percentiles(hist, fractions) {
  const entries = [...hist.entries()].sort((a, b) => a[0] - b[0]);
  const total = entries.reduce((s, [, n]) => s + n, 0);
  return {
    total,
    values: fractions.map((f) => {
      if (total === 0) return null;
      const want = f * total;
      let seen = 0;
      for (const [bucket, n] of entries) {
        seen += n;
        if (seen >= want) return bucketBounds(state.bounds, bucket)[1];
      }
      return null;
    }),
  };
}

async function fetchRange(from, to) {
  const step = to - from > 3600 || from < (state.newest || Date.now() / 1000) - 3600 ? 60 : 1;
  const series = await source.series(seriesIds(), from, to, step);
  const hists = new Map();
  const heatList = await Promise.all(heatIds().map((id) => source.heatmap(id, from, to, step)));
  for (const h of heatList) {
    state.bounds = h.bounds_us;
    const m = new Map();
    for (const c of h.cells) for (let j = 0; j < c.length; j += 2) m.set(c[j], (m.get(c[j]) || 0) + c[j + 1]);
    hists.set(h.id, m);
  }
  return { series, hists, heats: heatList, from, to };
}

function meanOf(values) {
  let s = 0;
  let n = 0;
  for (const v of values) if (v !== null) { s += v; n++; }
  return n ? s / n : null;
}

async function runCompare() {
  const a = [getInput("#cmp-a-from"), getInput("#cmp-a-to")];
  const b = [getInput("#cmp-b-from"), getInput("#cmp-b-to")];
  if (a[1] <= a[0] || b[1] <= b[0]) throw new Error("each range must end after it starts");
  const [A, B] = await Promise.all([fetchRange(a[0], a[1]), fetchRange(b[0], b[1])]);
  const out = $("#cmp-out");
  out.replaceChildren();

  // Means of the key figures.
  const V = state.volumes;
  const figures = [
    ["client reads", "ops/s", V.map((v) => `volume/${v}/read_ops`), null],
    ["client writes", "ops/s", V.map((v) => `volume/${v}/write_ops`), null],
    ["ARC hits", "ops/s", ["arc/hits"], null],
    ["L2ARC hits", "ops/s", ["arc/l2_hits"], null],
    ["backing-store reads", "ops/s", V.map((v) => `backing/${v}/read_ops`), null],
    ["ARC hit ratio", "%", null, [["arc/hits"], ["arc/misses"]]],
    ["L2ARC hit ratio", "%", null, [["arc/l2_hits"], ["arc/l2_misses"]]],
    ["ARC size", "bytes", ["arc/size"], null],
    ["L2ARC size", "bytes", ["arc/l2_size"], null],
  ];
  const figure = (R, ids, rat) => {
    const s = R.series.series;
    const n = R.series.times.length;
    const at = (id, k) => (s[id] ? s[id][k] : null);
    if (rat) {
      let h = 0;
      let m = 0;
      for (let k = 0; k < n; k++) {
        for (const id of rat[0]) h += at(id, k) || 0;
        for (const id of rat[1]) m += at(id, k) || 0;
      }
      return h + m > 0 ? (100 * h) / (h + m) : null;
    }
    const per = [];
    for (let k = 0; k < n; k++) {
      let sum = null;
      for (const id of ids) if (at(id, k) !== null && at(id, k) !== undefined) sum = (sum || 0) + at(id, k);
      per.push(sum);
    }
    return meanOf(per);
  };
  let html = "<h3>Means</h3><table class=\"cmp\"><thead><tr><th></th><th>A</th><th>B</th><th>B / A</th></tr></thead><tbody>";
  for (const [label, unit, ids, rat] of figures) {
    if (ids && !ids.some(has)) continue;
    const x = figure(A, ids, rat);
    const y = figure(B, ids, rat);
    html += "<tr><td>" + label + "</td><td>" + fmt(x, unit) + "</td><td>" + fmt(y, unit) +
      "</td><td>" + (x && y !== null ? (y / x).toFixed(2) + "x" : "–") + "</td></tr>";
  }
  html += "</tbody></table>";

  // Latency percentiles of every heat map, A beside B.
  const fr = [0.5, 0.9, 0.99, 0.999];
  html += "<h3>Latency percentiles (bucket upper bounds)</h3><table class=\"cmp\"><thead><tr><th></th>" +
    "<th>ops A</th><th>ops B</th>" + fr.map((f) => "<th>p" + f * 100 + " A</th><th>p" + f * 100 + " B</th>").join("") +
    "</tr></thead><tbody>";
  const rows = [];
  for (const v of V) {
    rows.push([v + " reads", ["read_arc", "read_l2", "read_backing"].map((q) => `frontend/${v}/${q}`)]);
    for (const q of ["read_arc", "read_l2", "read_backing", "write"]) rows.push([null, [`frontend/${v}/${q}`]]);
  }
  for (const id of heatIds()) if (!id.startsWith("frontend/")) rows.push([null, [id]]);
  for (const [label, ids] of rows) {
    const merge = (R) => {
      const m = new Map();
      for (const id of ids) for (const [k, n] of R.hists.get(id) || []) m.set(k, (m.get(k) || 0) + n);
      return m;
    };
    const pa = percentiles(merge(A), fr);
    const pb = percentiles(merge(B), fr);
    if (pa.total + pb.total === 0) continue;
    const name = label || (state.heatDefs.get(ids[0]) || {}).label || ids[0];
    html += "<tr><td>" + escapeHtml(name) + "</td><td>" + pa.total + "</td><td>" + pb.total + "</td>" +
      fr.map((_, i) => "<td>" + (pa.values[i] === null ? "–" : micros(pa.values[i])) + "</td><td>" +
        (pb.values[i] === null ? "–" : micros(pb.values[i])) + "</td>").join("") + "</tr>";
  }
  html += "</tbody></table>";
  const tables = document.createElement("div");
  tables.innerHTML = html;
  out.appendChild(tables);

  // Overlays: B's values drawn on A's time axis, dashed.
  const grid = document.createElement("div");
  grid.className = "grid";
  out.appendChild(grid);
  const shift = A.from - B.from;
  const overlay = (title, unit, ids) => {
    if (!ids.some(has)) return;
    const chart = new TimeChart(grid, { title, unit, hooks: { cursor: () => {}, select: () => {} } });
    const sumAt = (R, k) => {
      let s = null;
      for (const id of ids) {
        const v = R.series.series[id] ? R.series.series[id][k] : null;
        if (v !== null && v !== undefined) s = (s || 0) + v;
      }
      return s;
    };
    // Each range keeps its own points; B's are moved to start where A starts.
    chart.setData(A.series.times, A.series.step, [
      { label: "A", values: A.series.times.map((_, k) => sumAt(A, k)) },
      { label: "B (from its start)", values: B.series.times.map((_, k) => sumAt(B, k)),
        times: B.series.times.map((t) => t + shift), dashed: true },
    ]);
    chart.draw({ from: A.from, to: Math.max(A.to, B.to + shift), cursor: null, events: [], relative: true });
  };
  overlay("Client reads, A and B", "ops/s", V.map((v) => `volume/${v}/read_ops`));
  overlay("ARC hits, A and B", "ops/s", ["arc/hits"]);
  overlay("L2ARC hits, A and B", "ops/s", ["arc/l2_hits"]);
  overlay("Backing-store reads, A and B", "ops/s", V.map((v) => `backing/${v}/read_ops`));

  // The front end's read heat maps, A beside B.
  for (const v of V) {
    for (const [R, name] of [[A, "A"], [B, "B"]]) {
      const ids = ["read_arc", "read_l2", "read_backing"].map((q) => `frontend/${v}/${q}`);
      const parts = R.heats.filter((h) => ids.includes(h.id));
      if (!parts.length) continue;
      const hm = new HeatMap(grid, { title: v + " reads, " + name, hooks: { cursor: () => {}, select: () => {} }, tooltip });
      const times = parts[0].times;
      const cells = times.map((_, k) => {
        const m = new Map();
        for (const h of parts) {
          const c = h.cells[k] || [];
          for (let j = 0; j < c.length; j += 2) m.set(c[j], (m.get(c[j]) || 0) + c[j + 1]);
        }
        return [...m.entries()].sort((x, y) => x[0] - y[0]).flat();
      });
      hm.setData(times, parts[0].step, state.bounds, cells);
      hm.setScale(state.zoomUs, state.log);
      hm.draw({ from: R.from, to: R.to, cursor: null, events: state.events });
    }
  }
  inspect.compared = true;
}

// ---- start ----------------------------------------------------------------------------------

async function start() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("larch-token", fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  state.token = sessionStorage.getItem("larch-token") || "";
  $("#token").value = state.token;
  wireControls();
  if (STATIC) {
    await startStatic();
    return;
  }
  await readCatalog();
  build();
  await load();
  loadTunables().catch(showError);
  loadAdvice().catch(showError);
  setInterval(() => loadAdvice().catch(() => {}), 30000);
  setRefresh(Number($("#refresh").value));
  const live = new EventSource("/api/v1/live");
  live.addEventListener("sample", (e) => onSample(JSON.parse(e.data)));
  live.addEventListener("error", () => {
    $("#conn").textContent = "reconnecting…";
    $("#conn").className = "conn error";
  });
}

// A simulation's report: the whole run on one screen, its summary at the top, and none of
// what needs a daemon (the switch, the tunables, the live feed).
async function startStatic() {
  Charts.elapsedClock();
  for (const sel of ["#l2switch", "#tunables-panel", "#live", "#refresh"]) {
    const el = $(sel);
    (sel === "#refresh" ? el.parentElement : el).hidden = true;
  }
  $("#conn").textContent = "simulation (virtual time from its start)";
  $("#conn").className = "conn";
  const times = STATIC.times;
  const first = times.length ? times[0] - STATIC.step : 0;
  const last = times.length ? times[times.length - 1] : 1;
  state.newest = last;
  state.end = last;
  state.span = Math.max(1, last - first);
  const all = document.createElement("button");
  all.dataset.span = "whole";
  all.textContent = "whole run";
  $("#spans").prepend(all);
  const whole = state.span;
  all.addEventListener("click", () => {
    state.span = whole;
    state.end = last;
    setActive("#spans", "span", "whole");
    load().catch(showError);
  });
  setActive("#spans", "span", "whole");
  await readCatalog();
  document.title = "larch simulation · " + STATIC.pool;
  build();
  showSummary(STATIC.summary);
  await load();
  setRefresh(0);
}

// The summary of a simulation, in the strip at the top.
function showSummary(s) {
  const w = s.steady || {};
  const t = (x) => (x === null || x === undefined ? "not reached" : clock(x, true));
  const figures = [
    ["steady IOPS", fmt(w.iops, "ops/s")],
    ["first minute", fmt((s.first_minute || {}).iops, "ops/s")],
    ["mean latency", micros(w.mean_latency_us)],
    ["p99 read", micros(w.p99_us)],
    ["reads under 1 ms", fmt(100 * (w.reads_under_1ms || 0), "%")],
    ["ARC hit ratio", fmt(100 * (w.arc_hit_ratio || 0), "%")],
    ["L2ARC hit ratio", fmt(100 * (w.l2_hit_ratio || 0), "%")],
    ["ARC warm", t(s.arc_warm_s)],
    ["L2ARC 50% / 90%", t(s.l2_half_s) + " / " + t(s.l2_90_s)],
    ["header DRAM", fmt(s.larch_arc_hdr_bytes + s.larch_l2_index_bytes, "bytes") +
      " (OpenZFS " + fmt(s.openzfs_hdr_bytes, "bytes") + ")"],
  ];
  $("#now").replaceChildren(...figures.map(([label, text]) => {
    const d = document.createElement("div");
    d.innerHTML = '<span class="label">' + escapeHtml(label) + '</span><span class="figure">' +
      escapeHtml(text) + "</span>";
    return d;
  }));
}

// Reads the catalog: the series and heat maps the pool has, its volumes and devices.
let catalogRead = 0;

async function readCatalog() {
  if (Date.now() - catalogRead < 10000) return;
  catalogRead = Date.now();
  const catalog = await source.catalog();
  state.catalog = catalog;
  $("#pool").textContent = catalog.pool;
  document.title = "larch Analytics · " + catalog.pool;
  state.defs = new Map(catalog.series.map((x) => [x.id, x]));
  state.heatDefs = new Map(catalog.heatmaps.map((h) => [h.id, h]));
  const names = (prefix, q) => [...new Set(catalog.series
    .filter((s) => s.id.startsWith(prefix) && s.id.endsWith("/" + q))
    .map((s) => s.id.split("/")[1]))];
  state.volumes = names("volume/", "read_ops");
  state.objectVolumes = names("object/", "gets");
  const deviceName = (id, kind) => {
    const label = (state.defs.get(id) || {}).label || "";
    const cut = label.indexOf(" (" + kind + ")");
    return cut > 0 ? label.slice(0, cut) : id.split("/")[1];
  };
  state.caches = names("cache/", "read_ops").map((g) => ({ id: g, name: deviceName(`cache/${g}/read_ops`, "cache") }));
  state.logs = names("log/", "commits").map((g) => ({ id: g, name: deviceName(`log/${g}/commits`, "log") }));
}

start().catch((err) => showError(new Error("the daemon did not answer: " + err.message)));
