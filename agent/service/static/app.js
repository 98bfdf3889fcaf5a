// Ferry's chat page: plain JS, no build step, nothing from another host.
// Everything a session sends is untrusted: it is put in the page as text nodes only (never innerHTML).
"use strict";

const ENDED = new Set(["finished", "failed", "cancelled"]);
const TOKEN_KEY = "ferry.token";
const $ = (sel) => document.querySelector(sel);

// ---- DOM helpers -----------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

// ---- the diff highlighter --------------------------------------------------------------------------

const PY_KEYWORDS = new Set(("False None True and as assert async await break class continue def del elif else " +
  "except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield")
  .split(" "));
// a comment | a string (optional prefix; an unterminated one runs to the line's end) | a word | a number
const PY_TOKEN = new RegExp(
  "(#.*$)" +
  "|((?<![\\w])(?:[rRbBfFuU]{1,2})?(?:\"(?:[^\"\\\\]|\\\\.)*\"?|'(?:[^'\\\\]|\\\\.)*'?))" +
  "|([A-Za-z_][A-Za-z0-9_]*)" +
  "|((?<![\\w.])\\d[\\d_]*(?:\\.\\d*)?(?:[eE][+-]?\\d+)?j?)", "g");

// One line of Python as spans: keywords, strings, comments, numbers; the rest as plain text.
function highlightPython(code) {
  const out = [];
  let last = 0;
  PY_TOKEN.lastIndex = 0;
  for (let m = PY_TOKEN.exec(code); m !== null; m = PY_TOKEN.exec(code)) {
    if (m[0] === "") { PY_TOKEN.lastIndex++; continue; }
    let cls = null;
    if (m[1] !== undefined) cls = "py-com";
    else if (m[2] !== undefined) cls = "py-str";
    else if (m[3] !== undefined) cls = PY_KEYWORDS.has(m[3]) ? "py-kw" : null;
    else if (m[4] !== undefined) cls = "py-num";
    if (cls === null) continue;
    if (m.index > last) out.push(document.createTextNode(code.slice(last, m.index)));
    out.push(el("span", { class: cls }, m[0]));
    last = m.index + m[0].length;
  }
  if (last < code.length) out.push(document.createTextNode(code.slice(last)));
  return out;
}

function diffLineClass(line) {
  if (line.startsWith("+++") || line.startsWith("---")) return "d-file";
  if (line.startsWith("@@")) return "d-hunk";
  if (line.startsWith("diff ") || line.startsWith("index ") || line.startsWith("\\")) return "d-meta";
  if (line.startsWith("+")) return "d-add";
  if (line.startsWith("-")) return "d-del";
  return "d-ctx";
}

// A unified diff as one span per line (class d-add / d-del / d-hunk / d-file / d-ctx), Python coloured inside.
function highlightDiff(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text || "").replace(/\n$/, "").split("\n");
  for (const line of lines) {
    const cls = diffLineClass(line);
    const span = el("span", { class: "d-line " + cls });
    if (cls === "d-add" || cls === "d-del" || cls === "d-ctx") {
      span.append(el("span", { class: "d-mark" }, line.slice(0, 1)), ...highlightPython(line.slice(1)));
    } else {
      span.append(line);
    }
    frag.append(span, "\n");
  }
  return frag;
}

// ---- the API (the token goes in the Authorization header, never in a URL) ----------------------------

class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
  }
}

function authHeaders() {
  const token = $("#token").value.trim();
  return token ? { Authorization: "Bearer " + token } : {};
}

function describeDetail(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  }
  return JSON.stringify(detail);
}

async function api(method, path, body) {
  // X-Ferry-Request: a header a form on another site cannot send (a server without tokens wants it on
  // uploads, whose multipart body a cross-site form could otherwise post)
  const headers = { ...authHeaders(), "X-Ferry-Request": "1" };
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const resp = await fetch(path, { method, headers, body: payload });
  if (!resp.ok) {
    let detail = resp.statusText;
    try { detail = describeDetail((await resp.json()).detail); } catch (e) { /* not JSON */ }
    throw new ApiError(resp.status, detail);
  }
  return resp;
}

// ---- the session being watched -----------------------------------------------------------------------

const current = { id: null, lastId: 0, stream: null, view: null, resultShown: false, diffs: [] };

function sessionUrl(suffix) {
  return `/v1/sessions/${encodeURIComponent(current.id)}${suffix || ""}`;
}

function showStatus(view) {
  const node = $("#status");
  clear(node);
  node.className = "status state-" + view.state + (view.status ? " status-" + view.status : "");
  node.append(el("span", { class: "sid" }, view.id),
    el("span", { class: "badge" }, view.state + (view.status ? " · " + view.status : "")));
  if (view.step) node.append(el("span", { class: "step" }, "step: " + view.step));
  if (view.counts) {
    node.append(el("span", { class: "counts" },
      `${view.counts.steps || 0} steps · ${view.counts.edits || 0} edits · ${view.counts.runs || 0} runs`));
  }
  if (view.summary) node.append(el("div", { class: "summary" }, view.summary));
  if (view.error) node.append(el("div", { class: "error" }, view.error));
}

async function refreshStatus() {
  if (!current.id) return null;
  const id = current.id;
  const view = await (await api("GET", sessionUrl())).json();
  if (id !== current.id) return null;
  current.view = view;
  showStatus(view);
  if (view.state === "finished" && !current.resultShown) {
    current.resultShown = true;
    await showResult();
  }
  return view;
}

function addEvent(node) {
  const events = $("#events");
  events.append(node);
  events.scrollTop = events.scrollHeight;
}

function pre(text, cls) {
  return el("pre", { class: cls || "" }, text);
}

function diffBlock(diff) {
  const block = el("pre", { class: "diff" });
  block.append(highlightDiff(diff));
  return block;
}

function showDiffs(text) {
  const node = $("#diff");
  clear(node);
  node.append(highlightDiff(text));
}

async function answer(action, box) {
  for (const b of box.querySelectorAll("button")) b.disabled = true;
  try {
    await api("POST", sessionUrl("/approval"), { action });
    box.append(el("span", { class: "answered" }, action === "approve" ? "approved" : "rejected"));
    await refreshStatus();
  } catch (e) {
    for (const b of box.querySelectorAll("button")) b.disabled = false;
    box.append(el("span", { class: "error" }, String(e.message)));
  }
}

function renderEvent(id, kind, data) {
  const head = (label) => el("span", { class: "ev-kind" }, label);
  const item = el("div", { class: "event ev-" + kind, "data-id": id });
  switch (kind) {
    case "queued":
      item.append(head("queued"), "waiting for a worker");
      break;
    case "started":
      item.append(head("started"), `attempt ${data.attempt ?? 1}${data.resumed ? " (resumed from its checkpoint)" : ""}`);
      break;
    case "step":
      item.append(head("step"), el("b", {}, data.node || ""), " ", data.summary || "",
        data.seconds !== undefined && data.seconds !== null ? el("span", { class: "secs" }, ` ${Number(data.seconds).toFixed(2)} s`) : null);
      break;
    case "edit":
      item.append(head("edit"), el("b", {}, data.rule || ""), ` ${data.kind || ""} ${(data.files || []).join(", ")}`,
        data.by ? el("span", { class: "by" }, ` by ${data.by}`) : null,
        data.reason ? el("div", { class: "reason" }, data.reason) : null,
        data.diff ? diffBlock(data.diff) : null);
      if (data.diff) {
        current.diffs.push(data.diff);
        if (!current.resultShown) showDiffs(current.diffs.join("\n"));
      }
      break;
    case "run":
      item.append(head("run"), el("b", {}, data.kind || ""), " ", el("code", {}, data.command || ""),
        ` → ${data.status || ""}`, data.exit_code !== undefined && data.exit_code !== null ? ` (exit ${data.exit_code})` : "",
        data.duration_s !== undefined && data.duration_s !== null ? ` ${Number(data.duration_s).toFixed(1)} s` : "");
      break;
    case "approval_request": {
      const box = el("div", { class: "buttons" });
      box.append(el("button", { class: "approve", type: "button", onclick: () => answer("approve", box) }, "Approve"),
        el("button", { class: "reject", type: "button", onclick: () => answer("reject", box) }, "Reject"));
      item.append(head("approval?"), el("b", {}, data.rule || ""), data.site ? ` at ${data.site}` : "",
        data.reason ? el("div", { class: "reason" }, data.reason) : null,
        data.question ? el("div", { class: "reason" }, data.question) : null,
        data.diff ? diffBlock(data.diff) : null, box);
      break;
    }
    case "approval_answer":
      item.append(head("answer"), data.action || "");
      for (const b of document.querySelectorAll("#events .ev-approval_request button")) b.disabled = true;
      break;
    case "message":
      item.classList.add("message");
      item.append(head("you"), data.text || "");
      break;
    case "reply":
      item.classList.add("reply");
      item.append(head("ferry"), el("span", { class: "text" }, data.text || ""),
        data.intent ? el("span", { class: "intent" }, ` (${data.intent})`) : null);
      break;
    case "state":
    case "status":
      item.append(head(kind), [data.state, data.status].filter(Boolean).join(" · "),
        data.summary ? el("div", { class: "summary" }, data.summary) : null);
      break;
    case "error":
      item.classList.add("error");
      item.append(head("error"), data.detail || "");
      break;
    case "cancelled":
      item.append(head("cancelled"), "the session was cancelled");
      break;
    default:
      item.append(head(kind), pre(JSON.stringify(data, null, 1)));
  }
  addEvent(item);
}

// ---- the event stream: fetch + a streaming SSE parser (EventSource cannot send the header) -------------

function parseSse(buffer, onEvent) {
  // returns what is left of buffer after the complete events in it
  const blocks = buffer.split(/\r?\n\r?\n/);
  const rest = blocks.pop();
  for (const block of blocks) {
    let id = null, kind = "message", data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") id = value;
      else if (field === "event") kind = value;
      else if (field === "data") data.push(value);
    }
    if (id !== null || data.length) onEvent(id, kind, data.join("\n"));
  }
  return rest;
}

function onSseEvent(id, kind, text) {
  const n = Number(id);
  if (!Number.isInteger(n) || n <= current.lastId) return; // seen already (a reconnect never repeats one)
  current.lastId = n;
  let data = {};
  try { data = JSON.parse(text); } catch (e) { data = { text }; }
  renderEvent(n, kind, data);
  if (["state", "status", "approval_request", "approval_answer", "started", "cancelled", "error"].includes(kind)) {
    refreshStatus().catch(() => {});
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function follow(id, ctrl) {
  let delay = 500;
  while (!ctrl.signal.aborted && id === current.id) {
    try {
      const headers = authHeaders();
      if (current.lastId > 0) headers["Last-Event-ID"] = String(current.lastId);
      const resp = await fetch(sessionUrl("/events"), { headers, signal: ctrl.signal, cache: "no-store" });
      if (resp.status === 401 || resp.status === 404) throw new ApiError(resp.status, "cannot read this session");
      if (!resp.ok || !resp.body) throw new Error(`events: HTTP ${resp.status}`);
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = parseSse(buffer + value, onSseEvent);
        delay = 500;
      }
      const view = await refreshStatus();
      if (view && ENDED.has(view.state)) break; // the stream ended with the session: everything was sent
    } catch (e) {
      if (ctrl.signal.aborted) break;
      if (e instanceof ApiError) { $("#status").append(el("div", { class: "error" }, e.message)); break; }
    }
    await sleep(delay); // the server restarted or the network dropped: reconnect after the last id seen
    delay = Math.min(delay * 2, 8000);
  }
  if (current.stream === ctrl) current.stream = null;
}

function ensureStream() {
  if (!current.id || current.stream) return;
  const ctrl = new AbortController();
  current.stream = ctrl;
  follow(current.id, ctrl);
}

async function openSession(id) {
  if (current.stream) current.stream.abort();
  Object.assign(current, { id, lastId: 0, stream: null, view: null, resultShown: false, diffs: [] });
  for (const sel of ["#events", "#diff", "#parity", "#findings", "#downloads"]) clear($(sel));
  history.replaceState(null, "", "#" + encodeURIComponent(id));
  for (const li of document.querySelectorAll("#sessions li")) li.classList.toggle("current", li.dataset.id === id);
  try { await refreshStatus(); } catch (e) { showStatus({ id, state: "unknown", error: e.message }); return; }
  ensureStream();
}

// ---- a finished session: patch, parity, findings, downloads ---------------------------------------------

function fmt(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") return Math.abs(value) >= 1e4 || (value !== 0 && Math.abs(value) < 1e-3) ? value.toExponential(2) : String(Number(value.toPrecision(4)));
  return String(value);
}

function tolerance(t) {
  if (!t) return "—";
  return `${t.dtype}: rtol ${fmt(t.rtol)}, atol ${fmt(t.atol)}`;
}

// at most this many failing (or worst) rows before the full table; the rest are in the folded table
const NOTABLE_SHOWN = 10;

function parityTable(rows) {
  const table = el("table", { class: "parity" },
    el("thead", {}, el("tr", {}, ["metric", "kind", "reference", "target", "max abs", "max rel", "cosine",
      "tolerance", "verdict"].map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const row of rows) {
    const m = row.metrics || {};
    const ref = [row.ref_dtype, row.ref_shape ? `[${row.ref_shape.join("×")}]` : null].filter(Boolean).join(" ");
    const tgt = [row.target_dtype, row.target_shape ? `[${row.target_shape.join("×")}]` : null, row.target_device]
      .filter(Boolean).join(" ");
    body.append(el("tr", { class: "verdict-" + row.verdict },
      el("td", {}, el("code", {}, row.key)), el("td", {}, row.kind), el("td", {}, ref || "—"), el("td", {}, tgt || "—"),
      el("td", {}, fmt(m.max_abs)), el("td", {}, fmt(m.max_rel)), el("td", {}, fmt(m.cosine)),
      el("td", {}, tolerance(row.tolerances)),
      el("td", { class: "verdict", title: row.reason || "" }, row.verdict === "fail" ? "fail" : `pass (${row.verdict})`)));
  }
  table.append(body);
  return el("div", { class: "table-scroll" }, table);
}

// The parity result as report.md shows it: one line first (the result's headline), then only the failing or
// worst rows, then every compared tensor in a folded <details> (closed until opened; it scrolls sideways in
// its pane).
function showParity(result) {
  const node = $("#parity");
  clear(node);
  const parity = (result.result && result.result.parity) || {};
  const verdict = parity.verdict ? (parity.passed ? "pass" : "fail") : "none";
  node.append(el("p", { class: "parity-headline verdict-" + verdict },
    el("b", {}, parity.headline || `parity: ${parity.verdict || "not checked"}`)));
  if (parity.summary || parity.first_divergence) {
    node.append(el("p", { class: "parity-summary muted" }, parity.summary || "",
      parity.first_divergence && !parity.passed ? el("div", {}, `first divergence: ${parity.first_divergence}`) : null));
  }
  const rows = result.parity_rows || [];
  if (!rows.length) return;
  const notable = result.parity_notable || [];
  if (notable.length) {
    const failing = notable.some((row) => row.verdict !== "pass");
    const more = notable.length > NOTABLE_SHOWN ? ` (the first ${NOTABLE_SHOWN} of ${notable.length})` : "";
    node.append(el("h3", { class: "parity-notable-title" },
      (failing ? "Failing and warning tensors" : "The worst tensors") + more));
    node.append(el("div", { class: "parity-notable" }, parityTable(notable.slice(0, NOTABLE_SHOWN))));
  }
  node.append(el("details", { class: "parity-all" },
    el("summary", {}, `All ${rows.length} compared tensors`), parityTable(rows)));
}

function showFindings(result) {
  const node = $("#findings");
  clear(node);
  const findings = result.findings || [];
  if (!findings.length) {
    const profile = (result.result && result.result.profile) || {};
    node.append(el("p", { class: "muted" }, profile.error ? `no profile: ${profile.error}` : "no findings"));
    return;
  }
  const list = el("ul", { class: "findings" });
  for (const f of findings) {
    const where = f.file ? (f.line ? `${f.file}:${f.line}` : f.file) : "—";
    list.append(el("li", { class: "finding sev-" + f.severity },
      el("code", { class: "where" }, where), " ", el("b", {}, f.title), ` (${f.kind}, ${f.severity})`,
      f.source ? el("pre", { class: "source" }, f.source) : null,
      el("div", { class: "suggestion" }, f.suggestion)));
  }
  node.append(list);
}

async function download(suffix, filename) {
  try {
    const blob = await (await api("GET", sessionUrl(suffix))).blob();
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: filename });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    $("#downloads").append(el("span", { class: "error" }, e.message));
  }
}

async function showResult() {
  const id = current.id;
  const downloads = $("#downloads");
  clear(downloads);
  for (const [label, suffix, name] of [["patch", "/patch", `${id}.patch`], ["report", "/report", `${id}-report.md`],
    ["result.json", "/result", `${id}-result.json`], ["migrated tree", "/archive", `${id}.tar.gz`]]) {
    downloads.append(el("button", { type: "button", class: "small download", "data-what": suffix.slice(1),
      onclick: () => download(suffix, name) }, "⬇ " + label));
  }
  try {
    const result = await (await api("GET", sessionUrl("/result"))).json();
    if (id !== current.id) return;
    showParity(result);
    showFindings(result);
  } catch (e) {
    $("#parity").append(el("p", { class: "error" }, e.message));
  }
  try {
    const patch = await (await api("GET", sessionUrl("/patch"))).text();
    if (id === current.id) showDiffs(patch);
  } catch (e) { /* the edits' diffs stay shown */ }
}

// ---- sessions list, create, chat ------------------------------------------------------------------------

async function refreshSessions() {
  const list = $("#sessions");
  try {
    const page = await (await api("GET", "/v1/sessions?limit=50")).json();
    clear(list);
    for (const s of page.items) {
      list.append(el("li", { "data-id": s.id, class: s.id === current.id ? "current" : "" },
        el("button", { type: "button", class: "link", onclick: () => openSession(s.id) }, s.id),
        el("span", { class: "badge state-" + s.state }, s.state + (s.status ? " · " + s.status : "")),
        el("span", { class: "muted" }, ` ${s.source.name}`)));
    }
    if (!page.items.length) list.append(el("li", { class: "muted" }, "none yet"));
  } catch (e) {
    clear(list);
    list.append(el("li", { class: "error" }, e.message));
  }
}

async function createSession(event) {
  event.preventDefault();
  const errors = $("#create-error");
  errors.textContent = "";
  const options = { run: $("#run").value.trim(), device: $("#device").value, approve: $("#approve-mode").checked };
  if ($("#test").value.trim()) options.test = $("#test").value.trim();
  if ($("#llm").value) options.llm = $("#llm").value === "true";
  const file = $("#archive").files[0];
  const path = $("#path").value.trim();
  let body;
  if (file) {
    body = new FormData();
    body.append("archive", file, file.name);
    body.append("options", JSON.stringify(options));
  } else if (path) {
    body = { path, options };
  } else {
    errors.textContent = "choose an archive to upload or give a path on the server";
    return;
  }
  $("#create").disabled = true;
  try {
    const created = await (await api("POST", "/v1/sessions", body)).json();
    $("#archive").value = "";
    await refreshSessions();
    await openSession(created.id);
  } catch (e) {
    errors.textContent = e.message;
  } finally {
    $("#create").disabled = false;
  }
}

async function sendMessage(event) {
  event.preventDefault();
  const input = $("#message");
  const text = input.value.trim();
  if (!text || !current.id) return;
  $("#send").disabled = true;
  try {
    await api("POST", sessionUrl("/messages"), { text });
    input.value = "";
    ensureStream(); // the message and its reply come as events (a finished session's stream is read again)
  } catch (e) {
    addEvent(el("div", { class: "event error" }, e.message));
  } finally {
    $("#send").disabled = false;
  }
}

function init() {
  const token = $("#token");
  token.value = localStorage.getItem(TOKEN_KEY) || "";
  token.addEventListener("change", () => {
    localStorage.setItem(TOKEN_KEY, token.value.trim());
    refreshSessions();
  });
  $("#create-form").addEventListener("submit", createSession);
  $("#chat").addEventListener("submit", sendMessage);
  $("#refresh").addEventListener("click", refreshSessions);
  if (token.value) refreshSessions();
  else $("#sessions").append(el("li", { class: "muted" }, "enter your API token (a server without tokens: refresh)"));
  const id = decodeURIComponent(location.hash.slice(1));
  if (/^s[\w-]+$/.test(id)) openSession(id);
}

document.addEventListener("DOMContentLoaded", init);
