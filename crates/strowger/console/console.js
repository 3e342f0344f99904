// The web console: a page over the control API (/api/v1). The token stays in this tab's
// sessionStorage; every request carries it as a bearer token, the event stream as ?token=.
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("strowger-token");
let events = null;
let timers = [];
let plot = null;
const WINDOW_S = 300;
const series = [[], [], []]; // time, calls, CPU %

async function api(method, path) {
  const r = await fetch(path, { method, headers: { Authorization: "Bearer " + token } });
  if (r.status === 401) {
    logout("the token was refused");
    throw new Error("401");
  }
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  return td;
}

function status(text) {
  $("status").textContent = text;
}

async function showCalls() {
  const { calls } = await api("GET", "/api/v1/calls?limit=1000");
  const body = $("calls-body");
  body.replaceChildren();
  for (const c of calls) {
    const row = body.insertRow();
    row.dataset.id = c.id;
    cell(row, c.id);
    cell(row, c.from);
    cell(row, c.to);
    cell(row, c.state);
    cell(row, c.duration_s.toFixed(0) + " s", "num");
    cell(row, c.legs.map((l) => `${l.role} ${l.peer} ${l.codec || ""}`).join(" · "));
    const b = document.createElement("button");
    b.className = "hangup";
    b.textContent = "Hang up";
    b.onclick = () => hangUp(c.id);
    row.insertCell().append(b);
  }
  $("calls-count").textContent = `(${calls.length})`;
}

async function hangUp(id) {
  try {
    await api("DELETE", "/api/v1/calls/" + encodeURIComponent(id) + "?cause=normal");
    status("hung up " + id);
  } catch (e) {
    status("hang-up failed: " + e.message);
  }
  refresh();
}

async function showRegistrations() {
  const { registrations } = await api("GET", "/api/v1/registrations?limit=1000");
  const body = $("registrations-body");
  body.replaceChildren();
  for (const r of registrations) {
    for (const b of r.contacts) {
      const row = body.insertRow();
      cell(row, r.user);
      cell(row, `${b.contact} (${b.transport} from ${b.received})`);
      cell(row, b.expires_in + " s", "num");
    }
  }
}

async function showCdrs() {
  const q = encodeURIComponent($("cdr-search").value);
  const { cdrs } = await api("GET", `/api/v1/cdrs?limit=100&q=${q}`);
  const body = $("cdrs-body");
  body.replaceChildren();
  for (const c of cdrs) {
    const row = body.insertRow();
    cell(row, c.start ? new Date(c.start * 1000).toLocaleString() : "");
    cell(row, c.from);
    cell(row, c.to);
    cell(row, c.cause_text);
    cell(row, c.sip_status, "num");
    cell(row, c.hangup_side);
    cell(row, c.billable_s.toFixed(1), "num");
    cell(row, c.call_id);
  }
}

let lastCpu = null;
async function sample() {
  const s = await api("GET", "/api/v1/stats");
  const now = Date.now() / 1000;
  let cpu = null;
  if (lastCpu) cpu = (100 * (s.process_cpu_s - lastCpu.cpu)) / (now - lastCpu.at);
  lastCpu = { cpu: s.process_cpu_s, at: now };
  series[0].push(now);
  series[1].push(s.calls_active);
  series[2].push(cpu);
  while (series[0].length && series[0][0] < now - WINDOW_S) series.forEach((x) => x.shift());
  status(`${s.calls_active} calls · ${cpu == null ? "–" : cpu.toFixed(1)} % CPU`);
  if (plot) plot.setData(series);
}

function makePlot() {
  const width = Math.max(400, $("graph").clientWidth || window.innerWidth - 80);
  plot = new uPlot(
    {
      width,
      height: 320,
      series: [
        {},
        { label: "calls", stroke: "#1f6feb", scale: "calls" },
        { label: "CPU %", stroke: "#c62828", scale: "%" },
      ],
      axes: [{}, { scale: "calls", label: "calls" }, { scale: "%", side: 1, label: "CPU %", grid: { show: false } }],
    },
    series,
    $("plot"),
  );
}

async function showTranslation() {
  const { formats, cost_us } = await api("GET", "/api/v1/translation");
  const t = $("matrix");
  t.replaceChildren();
  const head = t.createTHead().insertRow();
  head.append(document.createElement("th"));
  for (const f of formats) {
    const th = document.createElement("th");
    th.textContent = f;
    head.append(th);
  }
  const body = t.createTBody();
  formats.forEach((f, i) => {
    const row = body.insertRow();
    const th = document.createElement("th");
    th.textContent = f;
    row.append(th);
    for (const c of cost_us[i]) cell(row, c == null ? "–" : c.toFixed(0));
  });
}

const views = { calls: showCalls, registrations: showRegistrations, cdrs: showCdrs, graph: async () => {}, translation: showTranslation };
let current = "calls";

async function refresh() {
  try {
    await views[current]();
  } catch (e) {
    if (e.message !== "401") status("error: " + e.message);
  }
}

function select(tab) {
  current = tab;
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("on", b.dataset.tab === tab);
  for (const s of document.querySelectorAll("section.tab")) s.hidden = s.id !== tab;
  if (tab === "graph" && !plot) makePlot();
  refresh();
}

// Calls and CDRs change with events: refresh soon rather than wait for the next poll.
let pending = null;
function listen() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  events = new WebSocket(`${proto}//${location.host}/api/v1/events?types=call&token=${encodeURIComponent(token)}`);
  // A busy switch sends many events a second: one refresh per half second serves them all,
  // rather than one list request (asked of every worker) per event.
  events.onmessage = () => {
    if ((current === "calls" || current === "cdrs") && !pending) {
      pending = setTimeout(() => {
        pending = null;
        refresh();
      }, 500);
    }
  };
  events.onclose = () => {
    if (token) setTimeout(listen, 2000);
  };
}

async function login(t) {
  token = t;
  try {
    await api("GET", "/api/v1/stats");
  } catch (e) {
    $("login-error").textContent = e.message === "401" ? "That token was refused." : "Cannot reach strowger: " + e.message;
    return;
  }
  sessionStorage.setItem("strowger-token", t);
  $("login").hidden = true;
  document.querySelector("main").hidden = false;
  $("tabs").hidden = false;
  $("logout").hidden = false;
  timers.push(setInterval(refresh, 2000), setInterval(() => sample().catch(() => {}), 1000));
  listen();
  select("calls");
}

function logout(why) {
  token = null;
  sessionStorage.removeItem("strowger-token");
  timers.forEach(clearInterval);
  timers = [];
  if (events) events.close();
  $("login").hidden = false;
  document.querySelector("main").hidden = true;
  $("tabs").hidden = true;
  $("logout").hidden = true;
  $("login-error").textContent = why || "";
}

$("login").onsubmit = (e) => {
  e.preventDefault();
  login($("token").value);
};
$("logout").onclick = () => logout();
for (const b of document.querySelectorAll("nav button")) b.onclick = () => select(b.dataset.tab);
$("cdr-search").oninput = () => refresh();
if (token) login(token);
