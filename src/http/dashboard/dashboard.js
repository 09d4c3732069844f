// The live dashboard: reads the gateway's SSE feed (/admin/pools/live) with fetch, because
// EventSource cannot send the Authorization header, and redraws small canvas charts once a
// second. No library and no CDN: everything it needs ships in this folder.
import { SseSplitter } from "./sse.js";

const TOKEN_KEY = "darvaze.adminToken";
/** Points kept per series: two minutes at one view per second. */
const HISTORY_POINTS_MAX = 120;
/** Series drawn per chart; the busiest are kept. */
const SERIES_PER_CHART_MAX = 8;
/** The largest event of the feed the page buffers (a cluster's view is far smaller). */
const EVENT_CHARS_MAX = 4 * 1024 * 1024;
/** Wait before reconnecting a dropped feed. */
const RECONNECT_MS = 2000;
const COLORS = ["#58a6ff", "#3fb950", "#d29922", "#f778ba", "#a371f7", "#56d4dd", "#ff7b72", "#e3b341"];

const $ = (id) => document.getElementById(id);

/** A line chart on a canvas: one line per series, over the last HISTORY_POINTS_MAX views. */
class Chart {
  constructor(canvas) {
    this.canvas = canvas;
    this.legend = canvas.parentElement.querySelector(".legend");
    this.series = new Map(); // name -> number[]
    this.updates = 0;
  }

  push(values) {
    for (const [name, value] of values) {
      if (!this.series.has(name)) this.series.set(name, new Array(this.updates).fill(0));
    }
    for (const [name, points] of this.series) {
      points.push(values.get(name) ?? 0);
      if (points.length > HISTORY_POINTS_MAX) points.shift();
    }
    this.updates++;
    this.draw();
  }

  draw() {
    const c = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = c.clientWidth;
    const height = c.clientHeight;
    if (c.width !== width * ratio) { c.width = width * ratio; c.height = height * ratio; }
    const g = c.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const shown = [...this.series.entries()]
      .sort((a, b) => Math.max(...b[1]) - Math.max(...a[1]))
      .slice(0, SERIES_PER_CHART_MAX);
    let max = 0;
    for (const [, points] of shown) for (const p of points) max = Math.max(max, p);
    const top = max > 0 ? max * 1.15 : 1;
    g.strokeStyle = "#263040";
    g.lineWidth = 1;
    for (let i = 1; i < 4; i++) {
      const y = Math.round((height * i) / 4) + 0.5;
      g.beginPath(); g.moveTo(0, y); g.lineTo(width, y); g.stroke();
    }
    g.fillStyle = "#7b8794";
    g.font = "10px system-ui, sans-serif";
    g.fillText(formatNumber(top), 4, 11);
    const step = width / (HISTORY_POINTS_MAX - 1);
    shown.forEach(([, points], i) => {
      g.strokeStyle = COLORS[i % COLORS.length];
      g.lineWidth = 1.5;
      g.beginPath();
      const offset = HISTORY_POINTS_MAX - points.length;
      points.forEach((p, j) => {
        const x = (offset + j) * step;
        const y = height - (p / top) * (height - 14) - 1;
        if (j === 0) g.moveTo(x, y); else g.lineTo(x, y);
      });
      g.stroke();
    });
    this.legend.replaceChildren(...shown.map(([name, points], i) => {
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = COLORS[i % COLORS.length];
      item.append(swatch, `${name} ${formatNumber(points[points.length - 1] ?? 0)}`);
      return item;
    }));
    // For tests and scripts: how often it was redrawn and the largest value shown.
    c.dataset.updates = String(this.updates);
    c.dataset.max = String(max);
  }
}

function formatNumber(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  if (n >= 100) return n.toFixed(0);
  if (n >= 1) return n.toFixed(1);
  return n === 0 ? "0" : n.toFixed(3);
}

const charts = {};
for (const canvas of document.querySelectorAll("canvas.chart")) charts[canvas.id.replace("chart-", "")] = new Chart(canvas);

function byName(rows, nameOf, valueOf) {
  const values = new Map();
  for (const row of rows) {
    const v = valueOf(row);
    if (v !== null && v !== undefined) values.set(nameOf(row), v);
  }
  return values;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function render(view) {
  const model = (m) => m.model;
  charts["model-rps"].push(byName(view.models, model, (m) => m.requestsPerS));
  charts["model-tps"].push(byName(view.models, model, (m) => m.tokensPerS));
  charts["model-ttft"].push(byName(view.models, model, (m) => m.ttftMs));
  charts["model-errors"].push(byName(view.models, model, (m) => m.errorsPerS));
  charts["model-spend"].push(byName(view.models, model, (m) => m.spendMicroPerS / 1e6));
  const backend = (b) => `${b.model}/${b.backend}`;
  charts["backend-tps"].push(byName(view.backends, backend, (b) => b.tokensPerS));
  charts["backend-ttft"].push(byName(view.backends, backend, (b) => b.ttftEwmaMs));
  charts["backend-inflight"].push(byName(view.backends, backend, (b) => b.inFlight));
  charts["backend-errors"].push(byName(view.backends, backend, (b) => b.errorRate));

  $("backends").tBodies[0].replaceChildren(...view.backends.map((b) => {
    const tr = document.createElement("tr");
    tr.dataset.backend = backend(b);
    tr.dataset.breaker = b.breaker;
    tr.className = b.breaker !== "closed" ? `breaker-${b.breaker}` : b.errorRate >= 0.5 ? "failing" : "";
    const badge = document.createElement("span");
    badge.className = `badge ${b.breaker}`;
    badge.textContent = b.breaker.replace("_", "-");
    const breaker = document.createElement("td");
    breaker.append(badge);
    tr.append(
      cell(b.model), cell(b.backend), cell(b.region), breaker,
      cell(`${b.inFlight}/${b.concurrencyLimit}`, "num"),
      cell(formatNumber(b.ttftEwmaMs), "num"),
      cell(b.tpotEwmaMs === null ? "–" : formatNumber(b.tpotEwmaMs), "num"),
      cell(formatNumber(b.tokensPerS), "num"),
      cell(formatNumber(b.requestsPerS), "num"),
      cell(`${Math.round(b.errorRate * 100)}%`, "num"),
      cell(String(b.nodes), "num"),
    );
    return tr;
  }));
  $("keys").tBodies[0].replaceChildren(...view.topKeys.map((k) => {
    const tr = document.createElement("tr");
    tr.append(cell(k.keyId), cell(k.name), cell(tomanOf(k.spentMicro), "num"));
    return tr;
  }));
  const nodes = view.nodes.length;
  setStatus(`live · ${nodes} node${nodes === 1 ? "" : "s"} · ${new Date(view.atMs).toLocaleTimeString()}`, "live");
}

/** Micro-toman (a decimal string) as toman with up to 6 decimals. */
function tomanOf(micro) {
  const s = String(micro).padStart(7, "0");
  const whole = s.slice(0, -6).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const fraction = s.slice(-6).replace(/0+$/, "");
  return fraction ? `${whole}.${fraction}` : whole;
}

function setStatus(text, state) {
  const el = $("status");
  el.textContent = text;
  el.className = `status ${state || ""}`;
}

let feed = null;

async function connect(token) {
  feed?.abort();
  const controller = new AbortController();
  feed = controller;
  let response;
  try {
    response = await fetch("/admin/pools/live", { headers: { authorization: `Bearer ${token}` }, signal: controller.signal });
  } catch (error) {
    if (controller.signal.aborted) return;
    setStatus("gateway unreachable; retrying", "down");
    setTimeout(() => connect(token), RECONNECT_MS);
    return;
  }
  if (response.status === 401) {
    signOut("The gateway refused this admin token.");
    return;
  }
  if (!response.ok || !response.body) {
    setStatus(`feed refused (HTTP ${response.status}); retrying`, "down");
    setTimeout(() => connect(token), RECONNECT_MS);
    return;
  }
  showMain();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const sse = new SseSplitter({ eventCharsMax: EVENT_CHARS_MAX });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const event of sse.push(value)) if (event.event === "pools") render(JSON.parse(event.data));
    }
  } catch (error) {
    if (controller.signal.aborted) return;
  }
  if (controller.signal.aborted) return;
  setStatus("feed closed; reconnecting", "down");
  setTimeout(() => connect(token), RECONNECT_MS);
}

function showMain() {
  $("login").hidden = true;
  $("main").hidden = false;
  $("logout").hidden = false;
}

function signOut(message) {
  feed?.abort();
  sessionStorage.removeItem(TOKEN_KEY);
  $("main").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  setStatus("not connected", "");
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  $("login-error").textContent = "";
  setStatus("connecting…", "");
  connect(token);
});
$("logout").addEventListener("click", () => signOut());

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) connect(saved);
