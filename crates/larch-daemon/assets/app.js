// The interim page: the newest second of the history, from /api/v1/live.
"use strict";

// Series shown, in order (those the pool has).
const SHOWN = ["arc/hits", "arc/misses", "arc/l2_hits", "arc/l2_misses", "arc/size", "arc/c",
  "arc/l2_size", "arc/hdr_size", "arc/l2_hdr_size", "arc/dirty_bytes"];

let units = {};

function show(sample) {
  document.getElementById("time").textContent = new Date(sample.time * 1000).toLocaleTimeString();
  const sw = sample.values["pool/l2arc_enabled"];
  document.getElementById("switch").textContent = sw === undefined ? "?" : (sw ? "on" : "off");
  document.getElementById("bytes").textContent = (sample.values["recorder/bytes"] || 0) + " bytes";
  const ids = SHOWN.concat(Object.keys(sample.values).filter((id) => id.startsWith("volume/")));
  const body = document.querySelector("#values tbody");
  body.replaceChildren(...ids.filter((id) => id in sample.values).map((id) => {
    const row = document.createElement("tr");
    for (const text of [id, String(sample.values[id]), units[id] || ""]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.appendChild(cell);
    }
    return row;
  }));
}

fetch("/api/v1/catalog")
  .then((r) => r.json())
  .then((catalog) => {
    document.getElementById("pool").textContent = catalog.pool;
    for (const s of catalog.series) units[s.id] = s.unit;
    const live = new EventSource("/api/v1/live");
    live.addEventListener("sample", (e) => show(JSON.parse(e.data)));
  })
  .catch((err) => {
    document.getElementById("time").textContent = "the daemon did not answer: " + err;
  });
