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

// node.append, leaving out null / undefined / false (DOM append would write them as the text "null")
function put(node, ...children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child);
  }
  return node;
}

// A command's argv as one line a shell would read back: words joined by spaces, quoted where needed.
function shellQuote(word) {
  const w = String(word);
  if (w !== "" && /^[\w@%+=:,./-]+$/.test(w)) return w;
  return "'" + w.replace(/'/g, "'\"'\"'") + "'";
}

function commandLine(command) {
  if (Array.isArray(command)) return command.map(shellQuote).join(" ");
  return command === null || command === undefined ? "" : String(command);
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

// ---- a safe Markdown subset (chat replies) -----------------------------------------------------------
// Headings, paragraphs, **bold**, *italic*, `code`, fenced code blocks (diff and python coloured), lists,
// simple tables and links to https or relative addresses; everything else stays text. Built from DOM
// nodes and text nodes only: no text is ever parsed as HTML.

function safeHref(url) {
  const u = String(url).trim();
  if (/[\u0000-\u001f\u007f]/.test(u)) return null;
  if (/^https:\/\//i.test(u)) return u;
  if (/^[a-z][a-z0-9+.-]*:/i.test(u) || u.startsWith("//") || u.startsWith("\\")) return null; // another scheme
  return u;
}

const MD_INLINE = new RegExp(
  "(`+)([\\s\\S]*?[^`])\\1(?!`)" +          // 1,2: `code`
  "|\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*" +      // 3: **bold**
  "|__(?=\\S)([\\s\\S]*?\\S)__(?!\\w)" +         // 4: __bold__
  "|\\[([^\\]\\n]+)\\]\\(([^()\\s]+)\\)" +      // 5,6: [text](url)
  "|(?<![\\w*])\\*(?=[^\\s*])([^*\\n]*?[^\\s*])\\*(?![\\w*])", // 7: *italic*
  "g");

function mdInline(text) {
  const out = [];
  let last = 0;
  const re = new RegExp(MD_INLINE.source, "g");
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    if (m[2] !== undefined) out.push(el("code", {}, m[2].replace(/^ (.*) $/, "$1")));
    else if (m[3] !== undefined || m[4] !== undefined) out.push(el("strong", {}, mdInline(m[3] ?? m[4])));
    else if (m[5] !== undefined) {
      const href = safeHref(m[6]);
      out.push(href === null ? document.createTextNode(m[0])
        : el("a", { href, rel: "noopener noreferrer", target: /^https:/i.test(href) ? "_blank" : null },
          mdInline(m[5])));
    } else if (m[7] !== undefined) out.push(el("em", {}, mdInline(m[7])));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

// inline text whose single newlines stay line breaks (a chat reply is not reflowed)
function mdLines(lines) {
  const out = [];
  lines.forEach((line, i) => {
    if (i) out.push(el("br"));
    out.push(...mdInline(line));
  });
  return out;
}

const MD_FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+-]*)\s*$/;
const MD_HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const MD_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const MD_TABLE_SEP = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

function tableCells(line) {
  let t = line.trim();
  if (t.startsWith("|")) t = t.slice(1);
  if (t.endsWith("|") && !t.endsWith("\\|")) t = t.slice(0, -1);
  return t.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function codeBlock(code, lang) {
  if (lang === "diff" || lang === "patch" || (!lang && /^(--- |\+\+\+ |@@ )/m.test(code))) {
    const block = el("pre", { class: "diff md-code" });
    block.append(highlightDiff(code));
    return block;
  }
  const block = el("pre", { class: "md-code" });
  const code_ = el("code");
  if (lang === "python" || lang === "py") {
    code.split("\n").forEach((line, i) => { if (i) code_.append("\n"); code_.append(...highlightPython(line)); });
  } else code_.append(code);
  block.append(code_);
  return block;
}

function renderMarkdown(text) {
  const root = el("div", { class: "md" });
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  const isBlank = (l) => /^\s*$/.test(l);
  const startsBlock = (k) => MD_FENCE.test(lines[k]) || MD_HEADING.test(lines[k]) || MD_ITEM.test(lines[k]) ||
    (lines[k].includes("|") && k + 1 < lines.length && MD_TABLE_SEP.test(lines[k + 1]));
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) { i++; continue; }
    const fence = MD_FENCE.exec(line);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !(lines[i].trim().startsWith(fence[1][0].repeat(fence[1].length)) &&
        /^\s*(`+|~+)\s*$/.test(lines[i]))) body.push(lines[i++]);
      i++; // the closing fence (or the end)
      root.append(codeBlock(body.join("\n"), fence[2].toLowerCase()));
      continue;
    }
    const heading = MD_HEADING.exec(line);
    if (heading) {
      root.append(el("h" + Math.min(heading[1].length + 2, 6), { class: "md-h" }, mdInline(heading[2])));
      i++;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && MD_TABLE_SEP.test(lines[i + 1])) {
      const head = tableCells(line);
      const table = el("table", { class: "md-table" },
        el("thead", {}, el("tr", {}, head.map((c) => el("th", {}, mdInline(c))))));
      const body = el("tbody");
      i += 2;
      while (i < lines.length && lines[i].includes("|") && !isBlank(lines[i])) {
        body.append(el("tr", {}, tableCells(lines[i]).map((c) => el("td", {}, mdInline(c)))));
        i++;
      }
      table.append(body);
      root.append(el("div", { class: "md-table-scroll" }, table));
      continue;
    }
    const item = MD_ITEM.exec(line);
    if (item) {
      const ordered = /\d/.test(item[2]);
      const list = el(ordered ? "ol" : "ul", { class: "md-list" });
      if (ordered && parseInt(item[2], 10) !== 1) list.setAttribute("start", String(parseInt(item[2], 10)));
      let entry = null;
      while (i < lines.length && !isBlank(lines[i])) {
        const m = MD_ITEM.exec(lines[i]);
        if (m && /\d/.test(m[2]) === ordered) {
          entry = { lines: [m[3]] };
          list.append(entry.node = el("li"));
          entry.node.append(...mdInline(m[3]));
        } else if (m || MD_FENCE.test(lines[i]) || MD_HEADING.test(lines[i])) {
          break;
        } else {
          entry.node.append(el("br"), ...mdInline(lines[i].trim())); // a continuation line
        }
        i++;
      }
      root.append(list);
      continue;
    }
    const para = [];
    while (i < lines.length && !isBlank(lines[i]) && (para.length === 0 || !startsBlock(i))) para.push(lines[i++]);
    root.append(el("p", {}, mdLines(para)));
  }
  return root;
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

// counts: the steps, edits and runs of the events read so far (the header follows the stream); phase: the
// last step's place in PHASES; resultAttempt: the attempt whose result (downloads, parity, diff) is shown
const FRESH = () => ({ lastId: 0, stream: null, view: null, resultShown: false, resultAttempt: 0, diffs: [],
  counts: { steps: 0, edits: 0, runs: 0 }, phase: null });
const current = { id: null, ...FRESH() };

// The migration's phases in the order a run goes through them; each graph node (a step event's "node")
// belongs to one. A fix round goes back to "run the migrated code".
const PHASES = [
  ["read the repository", ["ingest"]],
  ["run the original", ["reference_run"]],
  ["scan and plan", ["scan", "plan"]],
  ["rewrite", ["rewrite"]],
  ["run the migrated code", ["target_run", "await_reference", "diagnose", "llm_fix", "apply_fix"]],
  ["compare outputs (parity)", ["parity"]],
  ["tests", ["tests"]],
  ["CPU check", ["cpu_check"]],
  ["profile", ["profile", "profile_llm", "profile_verdict", "profile_revert"]],
  ["report", ["llm_explain", "report"]],
];

function phaseOf(node) {
  const n = PHASES.findIndex(([, nodes]) => nodes.includes(node));
  return n < 0 ? null : { n: n + 1, of: PHASES.length, label: PHASES[n][0] };
}

function sessionUrl(suffix) {
  return `/v1/sessions/${encodeURIComponent(current.id)}${suffix || ""}`;
}

function countsText() {
  const c = current.counts;
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  return `${plural(c.steps, "step")} · ${plural(c.edits, "edit")} · ${plural(c.runs, "run")}`;
}

function phaseText(view) {
  const p = current.phase;
  if (!p) return ENDED.has(view.state) ? "" : "starting";
  return `phase ${p.n} of ${p.of}: ${p.label}`;
}

// the header's counts and phase, from the events read so far
function showProgress() {
  const counts = document.querySelector("#status .counts");
  if (counts) counts.textContent = countsText();
  const phase = document.querySelector("#status .phase");
  if (phase && current.view) phase.textContent = phaseText(current.view);
}

// the session's line in "Your sessions" says what the header says
function syncSidebar(view) {
  const li = document.querySelector(`#sessions li[data-id="${CSS.escape(view.id)}"]`);
  const badge = li && li.querySelector(".badge");
  if (!badge) return;
  badge.className = "badge state-" + view.state;
  badge.textContent = view.state + (view.status ? " · " + view.status : "");
}

async function cancelSession(button) {
  button.disabled = true;
  try {
    await api("DELETE", sessionUrl());
    await refreshStatus();
  } catch (e) {
    button.disabled = false;
    $("#status").append(el("div", { class: "error" }, e.message));
  }
}

function showStatus(view) {
  const node = $("#status");
  clear(node);
  node.className = "status state-" + view.state + (view.status ? " status-" + view.status : "");
  put(node, el("span", { class: "sid" }, view.id),
    el("span", { class: "badge" }, view.state + (view.status ? " · " + view.status : "")));
  if (view.attempt && view.attempt > 1) node.append(el("span", { class: "attempt" }, `attempt ${view.attempt}`));
  if (view.state !== "unknown") {
    const phase = phaseText(view);
    if (phase || !ENDED.has(view.state)) node.append(el("span", { class: "phase" }, phase));
    node.append(el("span", { class: "counts" }, countsText()));
  }
  if (view.state !== "unknown" && !ENDED.has(view.state)) {
    const cancel = el("button", { type: "button", class: "small cancel", id: "cancel" }, "Cancel session");
    cancel.addEventListener("click", () => cancelSession(cancel));
    node.append(cancel);
  }
  if (view.summary) node.append(el("div", { class: "summary" }, view.summary));
  if (view.error) node.append(el("div", { class: "error" }, view.error));
  syncSidebar(view);
}

// A new attempt: the previous attempt's result (diff, parity, findings, downloads) is no longer the session's.
function newAttempt(attempt) {
  current.diffs = [];
  current.phase = null;
  if (current.resultAttempt >= attempt) return; // replaying a finished session: its result is this attempt's
  current.resultShown = false;
  current.resultAttempt = 0;
  for (const sel of ["#diff", "#parity", "#findings", "#downloads"]) clear($(sel));
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
    current.resultAttempt = view.attempt || 1;
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

const ANSWERED = { approve: "approved", reject: "rejected", edit: "your version sent" };

async function answer(action, box, diff) {
  const controls = box.querySelectorAll("button, textarea");
  for (const b of controls) b.disabled = true;
  for (const old of box.querySelectorAll(".error")) old.remove();
  try {
    await api("POST", sessionUrl("/approval"), action === "edit" ? { action, diff } : { action });
    box.append(el("span", { class: "answered" }, ANSWERED[action]));
    await refreshStatus();
  } catch (e) {
    for (const b of controls) b.disabled = false;
    box.append(el("span", { class: "error" }, String(e.message)));
  }
}

// "Edit": the proposed diff in a text box; what is sent is the reviewer's diff (POST .../approval, action=edit)
function editor(data, box) {
  const area = el("textarea", { class: "edit-diff", rows: 10, spellcheck: "false",
    "aria-label": "your version of the change, as a unified diff" });
  area.value = data.diff || "";
  const wrap = el("div", { class: "editor", hidden: true },
    el("div", { class: "muted" }, "Change the diff (against the files before this edit), then send it:"), area,
    el("button", { class: "send-edit small", type: "button", onclick: () => answer("edit", box, area.value) },
      "Apply my version"));
  return wrap;
}

function countEvent(kind, data) {
  if (kind === "step") {
    current.counts.steps++;
    current.phase = phaseOf(data.node) || current.phase;
  } else if (kind === "edit") current.counts.edits++;
  else if (kind === "run") current.counts.runs++;
  else if (kind === "attempt") newAttempt(Number(data.attempt) || 0);
  else return;
  showProgress();
}

function renderEvent(id, kind, data) {
  const head = (label) => el("span", { class: "ev-kind" }, label);
  const item = el("div", { class: "event ev-" + kind, "data-id": id });
  countEvent(kind, data || {});
  switch (kind) {
    case "queued":
      put(item, head("queued"), "waiting for a worker");
      break;
    case "started":
      put(item, head("started"), `attempt ${data.attempt ?? 1}${data.resumed ? " (resumed from its checkpoint)" : ""}`);
      break;
    case "step":
      put(item, head("step"), el("b", {}, data.node || ""), " ", data.summary || "",
        data.seconds !== undefined && data.seconds !== null ? el("span", { class: "secs" }, ` ${Number(data.seconds).toFixed(2)} s`) : null);
      break;
    case "edit":
      put(item, head("edit"), el("b", {}, data.rule || ""), ` ${data.kind || ""} ${(data.files || []).join(", ")}`,
        data.by ? el("span", { class: "by" }, ` by ${data.by}`) : null,
        data.reason ? el("div", { class: "reason" }, data.reason) : null,
        data.diff ? diffBlock(data.diff) : null);
      if (data.diff) {
        current.diffs.push(data.diff);
        if (!current.resultShown) showDiffs(current.diffs.join("\n"));
      }
      break;
    case "run":
      put(item, head("run"), el("b", {}, data.kind || ""), " ", el("code", { class: "command" }, commandLine(data.command)),
        ` → ${data.status || ""}`, data.exit_code !== undefined && data.exit_code !== null ? ` (exit ${data.exit_code})` : "",
        data.duration_s !== undefined && data.duration_s !== null ? ` ${Number(data.duration_s).toFixed(1)} s` : "");
      break;
    case "approval_request": {
      const box = el("div", { class: "buttons" });
      const edit = data.diff ? editor(data, box) : null;
      put(box, el("button", { class: "approve", type: "button", onclick: () => answer("approve", box) }, "Approve"),
        el("button", { class: "reject", type: "button", onclick: () => answer("reject", box) }, "Reject"),
        edit ? el("button", { class: "edit", type: "button", onclick: () => {
          edit.hidden = !edit.hidden;
          if (!edit.hidden) edit.querySelector("textarea").focus();
        } },
          "Edit…") : null, edit);
      put(item, head("approval?"), el("b", {}, data.rule || ""), data.site ? ` at ${data.site}` : "",
        data.reason ? el("div", { class: "reason" }, data.reason) : null,
        data.question ? el("div", { class: "reason" }, data.question) : null,
        data.diff ? diffBlock(data.diff) : null, box);
      break;
    }
    case "approval_answer":
      put(item, head("answer"), data.action || "",
        data.action === "edit" && (data.files || []).length ? ` (${data.files.join(", ")})` : null);
      for (const b of document.querySelectorAll("#events .ev-approval_request button, #events .ev-approval_request textarea")) b.disabled = true;
      break;
    case "message":
      item.classList.add("message");
      put(item, head("you"), data.text || "");
      break;
    case "reply":
      item.classList.add("reply");
      put(item, head("ferry"), data.intent ? el("span", { class: "intent" }, `(${data.intent})`) : null,
        renderMarkdown(data.text || ""));
      break;
    case "state":
    case "status":
      put(item, head(kind), [data.state, data.status].filter(Boolean).join(" · "),
        data.summary ? el("div", { class: "summary" }, data.summary) : null);
      break;
    case "error":
      item.classList.add("error");
      put(item, head("error"), data.detail || "");
      break;
    case "attempt":
      put(item, head("attempt"), `attempt ${data.attempt ?? "?"} queued`, data.why ? `: ${data.why}` : null);
      break;
    case "cancelled":
      put(item, head("cancelled"), "the session was cancelled");
      break;
    default:
      put(item, head(kind), pre(JSON.stringify(data, null, 1)));
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
  if (["state", "status", "approval_request", "approval_answer", "started", "attempt", "cancelled", "error"]
    .includes(kind)) {
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
  Object.assign(current, { id, ...FRESH() });
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

// a dotted name with a line-break chance after each dot, underscore, '#' or ':' (text nodes and <wbr>)
function breakable(name) {
  const out = [];
  for (const part of String(name ?? "").split(/(?<=[._#:])/)) out.push(part, el("wbr"));
  return out.slice(0, -1);
}

// One row per tensor, five columns so that it fits its pane: the tensor (its key, then what was compared
// and the tolerance, both wrapping), max abs, max rel, cosine and the verdict (its reason on hover).
function parityTable(rows) {
  const table = el("table", { class: "parity" },
    el("thead", {}, el("tr", {}, el("th", { class: "tensor" }, "tensor"),
      ["max abs", "max rel", "cosine"].map((h) => el("th", { class: "num" }, h)), el("th", {}, "verdict"))));
  const body = el("tbody");
  for (const row of rows) {
    const m = row.metrics || {};
    const ref = [row.ref_dtype, row.ref_shape ? `[${row.ref_shape.join("×")}]` : null].filter(Boolean).join(" ");
    const tgt = [row.target_dtype, row.target_shape ? `[${row.target_shape.join("×")}]` : null, row.target_device]
      .filter(Boolean).join(" ");
    const what = [row.kind, ref || tgt ? `${ref || "—"} → ${tgt || "—"}` : null,
      row.tolerances ? tolerance(row.tolerances) : null].filter(Boolean).join(" · ");
    body.append(el("tr", { class: "verdict-" + row.verdict },
      el("td", { class: "tensor" }, el("code", {}, breakable(row.key)), el("div", { class: "what muted" }, what)),
      el("td", { class: "num" }, fmt(m.max_abs)), el("td", { class: "num" }, fmt(m.max_rel)),
      el("td", { class: "num" }, fmt(m.cosine)),
      el("td", { class: "verdict", title: [row.tier, row.reason].filter(Boolean).join(": ") },
        row.verdict)));
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

// The profile's findings; each suggestion is Markdown (`code` spans) and is rendered as a chat reply is.
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
      el("div", { class: "suggestion" }, renderMarkdown(f.suggestion || ""))));
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
  // emptied as it is sent, not when the answer comes: what is typed meanwhile is the next message, kept
  input.value = "";
  try {
    await api("POST", sessionUrl("/messages"), { text });
    ensureStream(); // the message and its reply come as events (a finished session's stream is read again)
  } catch (e) {
    if (!input.value) input.value = text; // not sent: given back to edit
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
