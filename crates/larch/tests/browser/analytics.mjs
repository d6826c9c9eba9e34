// The Analytics page in real headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core), against a running `larch serve` whose clients are reading.
//
//   node analytics.mjs --page "$(larch analytics url)" --latency-us 4000 [--shots DIR]
//
// Run by crates/larch/tests/analytics_page.rs, which starts the daemon (a volume with an
// injected backing latency and a cache device) and fio. Checks, from the page itself:
// the charts hold data; the front end's heat map has counts below 200 µs (ARC hits) and at
// the injected latency (misses); hovering a heat-map cell shows its count and bounds; the
// L2ARC switch stops L2 hits and resumes them (from the page's numbers and from /status);
// the pool's events are marks on the charts, and hovering one shows it; the console has no
// errors. Prints what it saw as JSON; exits 1 with the reason when a
// check fails.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, "")] = argv[i + 1];
  for (const need of ["page", "latency-us"]) {
    if (!out[need]) throw new Error("missing --" + need);
  }
  return out;
}

const opts = args();
// The page's address as `larch analytics url` prints it: the token is in the fragment.
const pageUrl = new URL(opts.page);
const base = pageUrl.origin;
const latencyUs = Number(opts["latency-us"]);
const seen = {};
const failures = [];

function check(ok, what) {
  if (!ok) failures.push(what);
  return ok;
}

async function status() {
  const answer = await fetch(base + "/status");
  if (!answer.ok) throw new Error("/status answered " + answer.status);
  return answer.json();
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Waits until `probe` returns a truthy value, polling; returns it, or null at the deadline.
async function until(probe, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) return null;
    await sleep(250);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const consoleErrors = [];
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(e.message));
  // The token in the fragment: the page keeps it and removes it from the address.
  check(pageUrl.hash.startsWith("#token="), "the page's address carries no token: " + opts.page);
  await page.goto(pageUrl.href);
  const ready = await page.waitForFunction(
    () => window.larchPage && window.larchPage.ready && window.larchPage.samples >= 3,
    null, { timeout: 60000 }).then(() => true, () => false);
  if (!check(ready, "the page never loaded its data and three live samples")) throw new Error("not ready");
  seen.address = page.url();
  check(!page.url().includes("token"), "the token stayed in the address bar");

  // Charts hold data.
  seen.charts = await page.evaluate(() => larchPage.charts());
  seen.chartsWithData = await page.evaluate(() => larchPage.chartsWithData());
  check(seen.charts >= 15, `only ${seen.charts} charts on the page`);
  check(seen.chartsWithData >= 10, `only ${seen.chartsWithData} of ${seen.charts} charts hold data`);

  // The front end's heat map: DRAM hits below 200 µs, misses at the injected latency.
  seen.frontendBelow200us = await page.evaluate(() => larchPage.heatCount("frontend/", 0, 200));
  seen.frontendAtLatency = await page.evaluate(
    (us) => larchPage.heatCount("frontend/", us, us * 4), latencyUs);
  check(seen.frontendBelow200us > 0, "no front-end operations below 200 µs (ARC hits)");
  check(seen.frontendAtLatency > 0, `no front-end operations at the injected ${latencyUs} µs`);

  // Hovering a cell shows its count and bounds: try the bottom rows of the read heat map
  // at its newest columns until one holds operations.
  await page.click('#zooms button[data-zoom="1000"]');
  const box = await page.evaluate(() => {
    const heading = [...document.querySelectorAll(".chart.heat h3")].find((h) => /: reads$/.test(h.textContent));
    const r = heading.parentElement.querySelector("canvas").getBoundingClientRect();
    heading.parentElement.scrollIntoView();
    const r2 = heading.parentElement.querySelector("canvas").getBoundingClientRect();
    return { x: r2.left, y: r2.top, w: r.width, h: r.height };
  });
  let hovered = null;
  for (let dy = 21; dy < 120 && !hovered; dy += 3) {
    for (const dx of [12, 14, 18, 24]) {
      await page.mouse.move(box.x + box.w - dx, box.y + box.h - dy);
      const tip = await page.evaluate(() => larchPage.tooltip());
      if (tip && tip.count > 0) {
        hovered = { ...tip, text: await page.textContent("#tooltip") };
        break;
      }
    }
  }
  seen.hover = hovered;
  if (check(hovered !== null, "no heat-map cell under the mouse showed a count")) {
    check(/count\s*\d+/.test(hovered.text) && /latency .+ – .+/.test(hovered.text),
      "the tooltip does not show count and bounds: " + hovered.text);
    check(hovered.hi > hovered.lo, "the tooltip's bounds are empty");
  }
  await page.mouse.move(5, 5);
  await page.click('#zooms button[data-zoom="10000"]');

  // The tunables are listed with their values.
  seen.tunableShown = await page.evaluate(
    () => (document.querySelector('input[data-tunable="l2arc_enabled"]') || {}).value);
  check(seen.tunableShown === "1", "the tunables table does not show l2arc_enabled=1");

  // The workload panel: the pool's curves drawn, the what-if table and the advice.
  const advised = await until(async () => {
    await page.evaluate(() => larchPage.reloadAdvice());
    return page.evaluate(() => !!(larchPage.advice && !larchPage.advice.too_young));
  }, 30000);
  if (check(advised, "the advice panel never had a curve (the pool stayed too young)")) {
    seen.advice = await page.evaluate(() => {
      const a = larchPage.advice;
      const canvas = document.querySelector("#advise canvas");
      const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
      let inked = 0;
      for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && px[i] + px[i + 1] + px[i + 2] < 600) inked++;
      return {
        points: a.curves.arc.length,
        lines: a.lines.length,
        rows: document.querySelectorAll("#advice-text table tbody tr").length,
        volumes: a.volumes.length,
        inked,
        text: document.querySelector("#advice-text").textContent.slice(0, 300),
      };
    });
    check(seen.advice.points >= 20, `the ARC curve has ${seen.advice.points} points`);
    check(seen.advice.lines >= 2, "the panel gives no advice");
    check(seen.advice.rows >= 6, `the what-if tables have ${seen.advice.rows} rows`);
    check(seen.advice.volumes === 1, "the volume vol0 is missing from the advice");
    check(seen.advice.inked > 500, `the curve chart is blank (${seen.advice.inked} pixels drawn)`);
    check(/today/.test(seen.advice.text), "the panel does not say which row is today");
  }

  // L2 hits happen before the switch is flipped.
  const l2Before = await until(async () => {
    const s = await status();
    return s.arcstats.l2_hits > 0 ? s.arcstats.l2_hits : null;
  }, 60000);
  check(l2Before !== null, "no L2 hits before the switch was flipped (nothing to stop)");
  if (opts.shots) {
    mkdirSync(opts.shots, { recursive: true });
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: opts.shots + "/before-flip.png" });
  }

  // Off: L2 hits stop, on the page and in /status.
  await page.click("#l2switch");
  const off = await until(() => page.evaluate(() =>
    document.querySelector("#l2switch").dataset.state === "off"), 10000);
  check(off, "the switch did not turn off");
  await sleep(2500); // reads in flight when it flipped finish
  const s0 = await status();
  const pageZeros = await until(() => page.evaluate(() => {
    const el = document.getElementById("now-l2-hits");
    return el && el.dataset.value === "0";
  }), 10000);
  await sleep(3000);
  const s1 = await status();
  seen.l2HitsWhileOff = s1.arcstats.l2_hits - s0.arcstats.l2_hits;
  seen.switchTunableWhileOff = s1.tunables && s1.tunables.l2arc_enabled;
  check(pageZeros, "the page's L2ARC hits/s did not fall to 0 with the switch off");
  check(seen.l2HitsWhileOff === 0, `${seen.l2HitsWhileOff} L2 hits in 3 s with the switch off`);
  const readsWhileOff = s1.volumes.reduce((n, v) => n + v.backing_reads, 0) -
    s0.volumes.reduce((n, v) => n + v.backing_reads, 0);
  check(readsWhileOff > 0, "no reads at all while the switch was off (the test proves nothing)");
  seen.flipMarked = await page.evaluate(() => larchPage.events().some((e) => e.kind === "switch"));
  check(seen.flipMarked, "the flip is not an event on the charts");

  // The pool's events are marks on the charts: the flip, the daemon's start and the cache
  // device added before it (each with its short label); hovering a mark shows the event.
  await page.evaluate(() => window.scrollTo(0, 0));
  const marks = await until(() => page.evaluate(() => {
    const m = larchPage.eventMarks(0);
    return m.some((x) => x.kind === "switch") ? m : null;
  }), 10000);
  seen.marks = marks && marks.map((m) => m.kind + ": " + m.label);
  if (check(marks !== null, "the first chart marks no flip of the switch")) {
    check(marks.some((m) => m.kind === "restart"), "the daemon's start is not marked");
    check(marks.some((m) => m.kind === "cache.add" && m.label === "cache added"),
      "the cache device added before the start is not marked: " + seen.marks.join(", "));
    const flip = marks.filter((m) => m.kind === "switch").pop();
    let tip = null;
    for (const dx of [0, -1, 1, -2, 2]) {
      await page.mouse.move(flip.x + dx, (flip.top + flip.bottom) / 2);
      tip = await page.evaluate(() => larchPage.tooltip());
      if (tip && tip.event) break;
    }
    seen.eventTip = tip && { kind: tip.event.kind, text: await page.textContent("#tooltip") };
    if (check(tip && tip.event && tip.event.kind === "switch", "hovering the flip's mark shows no event")) {
      check(/L2ARC off/.test(seen.eventTip.text) && /l2arc_enabled=0/.test(seen.eventTip.text),
        "the flip's tooltip does not say what it was: " + seen.eventTip.text);
    }
    await page.mouse.move(5, 5);
  }

  // On again: L2 hits resume from what the devices hold.
  await page.click("#l2switch");
  const on = await until(() => page.evaluate(() =>
    document.querySelector("#l2switch").dataset.state === "on"), 10000);
  check(on, "the switch did not turn back on");
  const resumedOnPage = await until(() => page.evaluate(() => {
    const el = document.getElementById("now-l2-hits");
    return el && Number(el.dataset.value) > 0;
  }), 20000);
  check(resumedOnPage, "the page's L2ARC hits/s stayed at 0 after the switch was turned back on");
  const s2 = await status();
  seen.l2HitsAfterOn = s2.arcstats.l2_hits - s1.arcstats.l2_hits;
  check(seen.l2HitsAfterOn > 0, "/status counted no L2 hits after the switch was turned back on");
  if (opts.shots) {
    await sleep(3000);
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: opts.shots + "/after-flip.png" });
  }

  // Compare mode: before and after the flip, with percentiles.
  await page.click("#compare-open");
  await page.click("#cmp-flip");
  await page.click("#cmp-run");
  const compared = await until(() => page.evaluate(() => larchPage.compared === true), 15000);
  check(compared, "compare mode did not answer");
  if (compared) {
    seen.compareRows = await page.evaluate(() => document.querySelectorAll("#cmp-out table.cmp tbody tr").length);
    check(seen.compareRows >= 5, `compare mode shows ${seen.compareRows} rows`);
  }

  // What drawing costs at the fastest refresh (reported, not asserted: speed lives in
  // benchmarks).
  await page.selectOption("#refresh", "100");
  const rendersBefore = await page.evaluate(() => larchPage.renders);
  await sleep(3000);
  seen.rendersIn3sAt100ms = (await page.evaluate(() => larchPage.renders)) - rendersBefore;
  seen.lastRenderMs = await page.evaluate(() => larchPage.renderMs);

  seen.consoleErrors = consoleErrors;
  check(consoleErrors.length === 0, "console errors: " + consoleErrors.join(" | "));
} catch (err) {
  failures.push(String(err && err.stack ? err.stack : err));
} finally {
  await browser.close();
}
console.log(JSON.stringify({ seen, failures }, null, 2));
process.exit(failures.length ? 1 : 0);
