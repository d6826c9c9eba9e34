// Screenshots of the Analytics page for docs/, taken with the headless Chromium the
// browser test uses (Debian's chromium, driven by playwright-core installed in
// crates/larch/tests/browser by scripts/test).
//
//   node bench/analytics_screenshots.mjs URL OUT.png [--scroll SELECTOR] [--zoom 0|10000|1000]
//        [--span SECONDS] [--height PX] [--sources arc,l2,backing]
//
// Called by bench/analytics_screenshots.sh at chosen moments of its run.
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../crates/larch/tests/browser/package.json"));
const { chromium } = require("playwright-core");

const [url, out, ...rest] = process.argv.slice(2);
const opts = {};
for (let i = 0; i < rest.length; i += 2) opts[rest[i].replace(/^--/, "")] = rest[i + 1];

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1400, height: Number(opts.height || 1000) } });
await page.goto(url);
await page.waitForFunction(() => window.larchPage && window.larchPage.ready && window.larchPage.samples >= 2,
  null, { timeout: 60000 });
if (opts.span) {
  await page.click(`#spans button[data-span="${opts.span}"]`);
  await page.waitForTimeout(1500);
}
if (opts.zoom !== undefined) await page.click(`#zooms button[data-zoom="${opts.zoom}"]`);
if (opts.sources) {
  const keep = opts.sources.split(",").map((s) => "read_" + s);
  for (const box of await page.$$("input[data-source]")) {
    const want = keep.includes(await box.getAttribute("data-source"));
    if ((await box.isChecked()) !== want) await box.click();
  }
}
if (opts.scroll) {
  await page.evaluate((sel) => {
    const el = [...document.querySelectorAll("h2")].find((h) => h.textContent === sel);
    if (el) window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 50);
  }, opts.scroll);
}
await page.waitForTimeout(800);
await page.screenshot({ path: out });
await browser.close();
