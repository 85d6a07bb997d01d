// The Herald console: polls the management API once a second and renders
// it; the forms and buttons call the same API. No build step.
"use strict";

const $ = (id) => document.getElementById(id);

// The login, where the server has users: "user:password" in base64, kept
// for this tab only. The server asks the console for it with a 401 that
// does not make the browser prompt (the X-Herald header says who asks).
let login = sessionStorage.getItem("herald-login");

async function api(method, path, body) {
  // X-Herald: a change a plain cross-site form could not make.
  const headers = { "X-Herald": "console" };
  if (body) headers["Content-Type"] = "application/json";
  const used = login;
  if (used) headers.Authorization = `Basic ${used}`;
  const response = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const data = await response.json();
  if (response.status === 401) {
    // Forget a login that stopped working (polling with it would count
    // as guesses), and say why; an answer to an older login changes
    // nothing.
    if (used && used === login) logOut(data.error);
    else if (!login) showLogin(true);
    throw new Error("log in first");
  }
  if (!response.ok) {
    throw new Error(data.error || response.statusText);
  }
  return data;
}

function logOut(why) {
  login = null;
  sessionStorage.removeItem("herald-login");
  $("login-error").textContent = why || "";
  showLogin(true);
}

function showLogin(shown) {
  $("login-page").hidden = !shown;
  if (shown) $("server").textContent = "";
  $("logout").hidden = shown || !login;
  for (const id of ["overview", "queue-page", "topic-page", "server-page", "users-page"]) {
    if (shown) $(id).hidden = true;
  }
  if (!shown) route();
}

function cell(text, numeric) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (numeric) td.className = "n";
  return td;
}

// A destination, client id or other name: cut to the column's width with
// an ellipsis, the whole of it on hover, so that a long one does not push
// the numbers and buttons off the screen.
function nameCell(text) {
  const td = document.createElement("td");
  const span = document.createElement("span");
  span.className = "name";
  span.textContent = text === null || text === undefined ? "" : String(text);
  span.title = span.textContent;
  td.appendChild(span);
  return td;
}

// A name that links to its page.
function linkCell(text, href) {
  const td = nameCell(text);
  const link = document.createElement("a");
  link.href = href;
  link.replaceChildren(...td.childNodes);
  td.appendChild(link);
  return td;
}

// A button that calls `action`; with `question`, only once it is confirmed.
function button(label, action, question) {
  const td = document.createElement("td");
  const b = document.createElement("button");
  b.textContent = label;
  b.addEventListener("click", async () => {
    if (question && !window.confirm(question)) return;
    try {
      await action();
      $("error").textContent = "";
      await refresh();
    } catch (e) {
      $("error").textContent = e.message;
    }
  });
  td.appendChild(b);
  return td;
}

function fill(tableId, rows, render) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    render(tr, row);
    return tr;
  }));
}

const rate = (x) => (x || 0).toFixed(1);

// A counter's rate since the last look at it, per second.
const counters = new Map();
function perSecond(key, value) {
  const now = Date.now();
  const last = counters.get(key);
  counters.set(key, { value, at: now });
  if (!last || now <= last.at) return "";
  return ((value - last.value) * 1000 / (now - last.at)).toFixed(0);
}

// The smallest of 1, 2, 5 × 10^k at or above `v`: an axis that moves in
// steps a person reads, and does not jump with every sample.
function niceCeiling(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((c) => c >= v);
}

// Draws `series` ({label, color, points: [[seconds since epoch, value]]})
// over the last `windowS` seconds: time on the x axis (minutes ago), the
// values on the y axis in `unit`, with gridlines and a legend.
function drawChart(canvas, series, windowS, unit) {
  // Drawn at the size it is shown, so that text is not stretched.
  if (canvas.clientWidth && canvas.width !== canvas.clientWidth) canvas.width = canvas.clientWidth;
  if (canvas.clientHeight && canvas.height !== canvas.clientHeight) canvas.height = canvas.clientHeight;
  const ctx = canvas.getContext("2d");
  const [w, h] = [canvas.width, canvas.height];
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  const now = Date.now() / 1000;
  // Four gridlines a step apart; a count never steps by less than one.
  const highest = Math.max(0, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const step = Math.max(niceCeiling(highest / 4), unit === "msgs" ? 1 : 0.25);
  const max = step * 4;
  const label = (v) => `${Number.isInteger(v) ? v : v.toFixed(2)} ${unit}`;
  const left = 8 + Math.max(...[0, 1, 2, 3, 4].map((k) => ctx.measureText(label(step * k)).width));
  const [right, top, bottom] = [10, 10, 22];
  const x = (t) => left + (1 - (now - t) / windowS) * (w - left - right);
  const y = (v) => h - bottom - (v / max) * (h - top - bottom);
  ctx.strokeStyle = "#e3e6ea";
  ctx.fillStyle = "#555";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let k = 0; k <= 4; k++) {
    const v = step * k;
    ctx.beginPath();
    ctx.moveTo(left, y(v));
    ctx.lineTo(w - right, y(v));
    ctx.stroke();
    ctx.fillText(label(v), left - 4, y(v));
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const tick = windowS <= 300 ? 60 : 600;
  for (let ago = 0; ago <= windowS; ago += tick) {
    ctx.fillText(ago ? `${ago / 60} min ago` : "now", x(now - ago), h - bottom + 6);
  }
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, 0, w - left - right, h);
  ctx.clip();
  for (const s of series) {
    ctx.beginPath();
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 1.5;
    s.points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
    ctx.stroke();
  }
  ctx.restore();
  ctx.textAlign = "left";
  ctx.textBaseline = "top";
  series.forEach((s, i) => {
    ctx.fillStyle = s.color;
    ctx.fillText(s.label, left + 8 + i * 150, top);
  });
}

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
const WINDOWS = { "5m": 300, "1h": 3600 };

// The overview's chart: messages a second in and out, over the chosen
// window.
async function drawRates(history) {
  const window = $("chart-window").value;
  const samples = window === "5m" ? history : await api("GET", "/api/history?window=1h");
  drawChart($("chart"), [
    { label: "in", color: COLORS[0], points: samples.map((s) => [s.at, s.in_rate]) },
    { label: "out", color: COLORS[1], points: samples.map((s) => [s.at, s.out_rate]) },
  ], WINDOWS[window], "msgs/s");
}

async function refresh() {
  if (current === "queue") {
    const window = $("q-window").value;
    const [queues, history] = await Promise.all([api("GET", "/api/queues"),
      api("GET", `/api/history?window=${window}&queue=${encodeURIComponent(page.queue)}`)]);
    showFigures(queues);
    const q = history.filter((s) => s.queue);
    drawChart($("q-depth-chart"), [
      { label: "waiting", color: COLORS[0], points: q.map((s) => [s.at, s.queue.depth]) },
    ], WINDOWS[window], "msgs");
    drawChart($("q-rate-chart"), [
      { label: "enqueued", color: COLORS[2], points: q.map((s) => [s.at, s.queue.enqueue_rate]) },
      { label: "acknowledged", color: COLORS[1], points: q.map((s) => [s.at, s.queue.dequeue_rate]) },
    ], WINDOWS[window], "msgs/s");
    return;
  }
  if (current === "server") {
    showServer(await api("GET", "/api/server"));
    return;
  }
  if (current === "users") return;
  if (current === "topic") {
    const name = encodeURIComponent(topicName);
    const window = $("t-window").value;
    const [topic, history] = await Promise.all([api("GET", `/api/topics/${name}`),
      api("GET", `/api/history?window=${window}&topic=${name}`)]);
    showTopic(topic);
    drawChart($("t-chart"), [{ label: "published", color: COLORS[0],
      points: history.filter((s) => s.topic).map((s) => [s.at, s.topic.rate]) }], WINDOWS[window], "msgs/s");
    return;
  }
  const [server, queues, topics, subscriptions, connections, history] = await Promise.all([
    api("GET", "/api/server"),
    api("GET", "/api/queues"),
    api("GET", "/api/topics"),
    api("GET", "/api/subscriptions"),
    api("GET", "/api/connections"),
    api("GET", "/api/history"),
  ]);
  $("server").textContent =
    `version ${server.version} · up ${server.uptime_s} s · ${server.connections} connections · ` +
    `${server.messages_in} in · ${server.messages_out} out`;
  fill("queues", queues, (tr, q) => {
    tr.dataset.queue = q.name;
    tr.append(linkCell(q.name, `#/queue/${encodeURIComponent(q.name)}`), cell(q.depth, true), cell(q.in_flight, true),
      cell(q.paging_stopped ? `${q.paged} (stopped)` : q.paged, true), cell(q.consumers, true),
      cell(rate(q.enqueue_rate), true), cell(rate(q.dequeue_rate), true),
      button("Purge", () => api("POST", queuePath(q.name, "/purge")),
        `Purge queue ${q.name}? Its ${q.depth} waiting message(s) are dropped.`),
      button("Delete", () => api("DELETE", queuePath(q.name, "")), deleteQuestion(q)));
    tr.children[1].classList.add("depth");
  });
  fill("topics", topics.topics, (tr, t) => {
    tr.dataset.topic = t.name;
    tr.append(linkCell(t.name, `#/topic/${encodeURIComponent(t.name)}`), cell(t.messages_in, true), cell(t.deliveries, true), cell(rate(t.rate), true));
  });
  fill("patterns", topics.patterns, (tr, p) => tr.append(nameCell(p.pattern), cell(p.subscribers, true)));
  fill("diverts", topics.diverts || [], (tr, d) => tr.append(nameCell(d.name), nameCell(d.from),
    nameCell(d.to), nameCell(d.selector || ""), cell(d.exclusive ? "yes" : "no")));
  fill("subscriptions", subscriptions, (tr, s) => {
    tr.append(cell(s.kind), nameCell(s.pattern), nameCell(s.selector), nameCell(s.name),
      nameCell(s.client_id), cell(s.connection), cell(s.backlog, true));
    tr.append(s.durable && s.connection === null
      ? button("Delete", () => api("DELETE",
          `/api/subscriptions/${encodeURIComponent(s.client_id)}/${encodeURIComponent(s.name)}`),
        `Delete durable subscription ${s.name} of ${s.client_id}? Its ${s.backlog} waiting message(s) go with it.`)
      : cell(""));
  });
  const subscribed = new Map();
  for (const s of subscriptions) {
    if (s.connection === null) continue;
    subscribed.set(s.connection, [...(subscribed.get(s.connection) || []), s.pattern]);
  }
  fill("connections", connections, (tr, c) => {
    tr.dataset.connection = c.id;
    const subs = cell(c.subscriptions, true);
    subs.title = (subscribed.get(c.id) || []).join("\n");
    tr.append(cell(c.id, true), nameCell(c.client_id), nameCell(c.user), cell(c.peer), cell(c.protocol),
      cell(c.tls ? "yes" : "no"), cell(c.since), subs,
      cell(perSecond(`msgs in ${c.id}`, c.messages_in), true), cell(perSecond(`msgs out ${c.id}`, c.messages_out), true),
      cell(perSecond(`in ${c.id}`, c.bytes_in), true), cell(perSecond(`out ${c.id}`, c.bytes_out), true),
      button("Close", () => api("DELETE", `/api/connections/${c.id}`),
        `Close connection ${c.id} (${c.client_id || c.peer})? Its client is disconnected.`));
  });
  await drawRates(history);
}

$("publish").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const result = await api("POST", "/api/publish", {
      destination: $("publish-destination").value,
      body: $("publish-body").value,
      persistent: $("publish-persistent").checked,
    });
    $("publish-result").textContent = `published to ${result.destination}: routed to ${result.routed} subscription(s) and queue(s)`;
    await refresh();
  } catch (e) {
    $("publish-result").textContent = `refused: ${e.message}`;
  }
});

// ---- A topic's page ----

function showTopic(t) {
  $("t-figures").textContent = `${t.messages_in} published (${bytes(t.bytes_in)}) · ` +
    `${t.deliveries} deliveries (${bytes(t.bytes_out)}) · ${t.subscriptions.length} subscription(s)` +
    ` · ${t.retained.length} retained`;
  const kind = (s) => s.durable ? "durable" : s.shared ? "shared" : "plain";
  fill("t-subscriptions", t.subscriptions, (tr, s) => {
    tr.append(cell(kind(s)), nameCell(s.pattern), nameCell(s.selector), nameCell(s.name), nameCell(s.client_id),
      cell(s.connection === null ? "none" : `connection ${s.connection}`), cell(s.backlog, true));
    tr.append(s.durable && s.connection === null
      ? button("Delete", async () => {
          await api("DELETE",
            `/api/subscriptions/${encodeURIComponent(s.client_id)}/${encodeURIComponent(s.name)}`);
          $("t-result").textContent = `deleted ${s.client_id}/${s.name}`;
        }, `Delete durable subscription ${s.name} of ${s.client_id}? Its ${s.backlog} waiting message(s) go with it.`)
      : cell(""));
  });
  fill("t-retained", t.retained, (tr, m) => {
    const props = Object.entries(m.properties || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    const body = nameCell(bodyText(m.body || {}));
    body.className = "body";
    tr.append(nameCell(m.id), cell(m.timestamp), nameCell(props), body);
  });
  // A keyed topic (DDS instances): its settings and each instance.
  const i = t.instances;
  const keyed = i.key.length > 0 || i.durability !== "volatile";
  $("t-instances-section").hidden = !keyed;
  $("t-instances-settings").textContent = keyed
    ? `key [${i.key.join(", ")}] · ${i.history} (depth ${i.history_depth}) · ${i.durability} · ` +
      `at most ${i.max_instances} instances, ${i.max_samples_per_instance} samples each`
    : "";
  fill("t-instances", keyed ? i.instances : [], (tr, x) => {
    tr.append(nameCell(x.key), cell(x.state), cell(x.samples, true));
  });
}

// ---- The server page and the users page ----

function facts(id, pairs) {
  $(id).replaceChildren(...pairs.flatMap(([k, v]) => {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v === null || v === undefined ? "—" : String(v);
    return [dt, dd];
  }));
}

const bytes = (n) => n === undefined || n === null ? "—"
  : n >= 1 << 30 ? `${(n / (1 << 30)).toFixed(1)} GiB`
  : n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB`
  : n >= 1 << 10 ? `${(n / (1 << 10)).toFixed(1)} KiB` : `${n} B`;

function showServer(s) {
  facts("s-server", [
    ["version", s.version], ["started", s.started], ["up", `${s.uptime_s} s`],
    ["config file", s.config_file || "embedded defaults"], ["workers", s.workers],
    ["connections", s.connections], ["subscriptions", s.subscriptions],
    ["messages in / out", `${s.messages_in} / ${s.messages_out}`],
    ["resident memory", bytes(s.process && s.process.rss_bytes)],
  ]);
  const j = s.journal || {};
  const disk = j.disk || {};
  facts("s-journal", [
    ["directory", j.dir], ["segments", j.segments], ["size", bytes(j.size_bytes)], ["fsync", j.fsync],
    ["disk free", bytes(disk.free_bytes)], ["free-space floor", bytes(disk.min_free_bytes)],
    ["below the floor", disk.low ? "yes: persistent messages are held or refused" : "no"],
  ]);
  facts("s-listeners", Object.entries(s.listeners).filter(([, a]) => a));
  const c = s.cluster;
  facts("s-cluster", c ? [
    ["node id", c.node_id], ["link to Redis", c.connected ? "up" : "down"],
    ["Redis primary", c.primary ? `${c.primary.addr} (${c.primary.changes} failovers followed)` : "as configured"],
    ["published / received", `${c.published} / ${c.received}`],
  ] : [["mode", "single node (no [cluster] redis)"]]);
  $("s-nodes-section").hidden = !c;
  fill("s-nodes", c ? c.nodes : [], (tr, n) => tr.append(nameCell(n.this ? `${n.id} (this node)` : n.id),
    cell(n.version), cell(n.started), cell(n.last_seen_s === null ? "" : `${n.last_seen_s} s ago`, true),
    cell(n.native), n.admin ? linkCell(n.admin, n.admin) : cell("")));
  const text = JSON.stringify(s.settings, null, 2);
  if ($("s-config").textContent !== text) $("s-config").textContent = text;
}

async function loadUsers() {
  const u = await api("GET", "/api/users");
  $("u-note").textContent = !u.editable
    ? "This server runs on its embedded defaults: start it with --config FILE to add users here."
    : u.users.length
    ? "Changes are written to the config file (in a cluster, shared with every node) and in force at once."
    : "No users are configured: every connection may do everything. Add one (with an admin role) to require logins.";
  for (const id of ["u-form", "r-form"]) $(id).hidden = !u.editable;
  const editable = (render) => (u.editable ? render() : cell(""));
  fill("u-users", u.users, (tr, x) => tr.append(nameCell(x.name), nameCell(x.roles.join(", ")), cell(x.source),
    editable(() => button("Edit", () => editUser(x))),
    editable(() => button("Delete", () => changeUsers("DELETE", `/api/users/${encodeURIComponent(x.name)}`),
      `Delete user ${x.name}? Its connections lose their permissions at once.`))));
  const list = (v) => nameCell((v || []).join(", "));
  fill("u-roles", Object.entries(u.roles), (tr, [name, r]) => tr.append(nameCell(name), list(r.publish),
    list(r.consume), list(r.browse), list(r.durable), cell(r.admin ? "yes" : ""), cell(r.monitor ? "yes" : ""),
    editable(() => button("Edit", () => editRole(name, r))),
    editable(() => button("Delete", () => changeUsers("DELETE", `/api/roles/${encodeURIComponent(name)}`),
      `Delete role ${name}?`))));
}

// A change to the users or roles, then the page again.
async function changeUsers(method, path, body) {
  const r = await api(method, path, body);
  await loadUsers();
  return r;
}

const patterns = (id) => $(id).value.split(",").map((p) => p.trim()).filter((p) => p);

function editUser(x) {
  $("u-name").value = x.name;
  $("u-password").value = "";
  $("u-user-roles").value = x.roles.join(", ");
  $("u-password").focus();
}

function editRole(name, r) {
  $("r-name").value = name;
  for (const key of ["publish", "consume", "browse", "durable"]) $(`r-${key}`).value = (r[key] || []).join(", ");
  $("r-monitor").checked = !!r.monitor;
  $("r-admin").checked = !!r.admin;
}

// A form's submission: its result, or its error, beside it.
function submitter(form, result, send) {
  $(form).addEventListener("submit", async (event) => {
    event.preventDefault();
    const said = $(result);
    try {
      said.textContent = await send();
      said.className = "";
    } catch (e) {
      said.className = "error";
      said.textContent = e.message;
    }
  });
}

submitter("u-form", "u-result", async () => {
  const name = $("u-name").value.trim();
  const body = { roles: patterns("u-user-roles") };
  if ($("u-password").value) body.password = $("u-password").value;
  await changeUsers("PUT", `/api/users/${encodeURIComponent(name)}`, body);
  $("u-password").value = "";
  return `saved ${name}`;
});

submitter("r-form", "r-result", async () => {
  const name = $("r-name").value.trim();
  const body = { monitor: $("r-monitor").checked, admin: $("r-admin").checked };
  for (const key of ["publish", "consume", "browse", "durable"]) body[key] = patterns(`r-${key}`);
  await changeUsers("PUT", `/api/roles/${encodeURIComponent(name)}`, body);
  return `saved ${name}`;
});

// ---- Queues: create, delete, and one queue's page ----

const queuePath = (name, rest) => `/api/queues/${encodeURIComponent(name)}${rest}`;
const deleteQuestion = (q) =>
  `Delete queue ${q.name}? Its ${q.depth + q.in_flight + (q.scheduled || 0)} message(s) go with it.`;

submitter("create-queue", "create-queue-result", async () => {
  const r = await api("POST", "/api/queues", { name: $("create-queue-name").value });
  await refresh();
  return r.created ? `created ${r.queue}` : `${r.queue} exists already`;
});

// The queue page's state: which queue, its page of messages, and what
// is selected. Its messages are fetched when it opens and after an
// action or a Refresh, not every second: a table that changes under the
// pointer loses what was selected.
const page = { queue: null, offset: 0, limit: 50, total: 0, messages: [], selected: new Set() };

// Which page the address names: the overview, a queue, the server, the
// users and roles.
let current = "overview";
let topicName = null;

function route() {
  if (!$("login-page").hidden) return;
  const m = location.hash.match(/^#\/queue\/(.+)$/);
  page.queue = m ? decodeURIComponent(m[1]) : null;
  const t = location.hash.match(/^#\/topic\/(.+)$/);
  topicName = t ? decodeURIComponent(t[1]) : null;
  current = page.queue !== null ? "queue"
    : topicName !== null ? "topic"
    : location.hash === "#/server" ? "server"
    : location.hash === "#/users" ? "users" : "overview";
  $("overview").hidden = current !== "overview";
  $("queue-page").hidden = current !== "queue";
  $("server-page").hidden = current !== "server";
  $("users-page").hidden = current !== "users";
  $("topic-page").hidden = current !== "topic";
  if (current === "topic") {
    $("t-name").textContent = topicName;
    $("t-result").textContent = "";
  }
  if (current === "users") loadUsers().catch((e) => { $("error").textContent = e.message; });
  if (page.queue !== null) {
    page.offset = 0;
    page.selected.clear();
    $("q-name").textContent = page.queue;
    $("q-result").textContent = "";
    $("q-selector").value = "";
    $("q-to").value = "";
    loadMessages().catch((e) => report("", [e.message]));
  }
  refresh().catch(() => {});
}

async function loadMessages() {
  const selector = encodeURIComponent($("q-selector").value);
  const r = await api("GET",
    queuePath(page.queue, `/messages?offset=${page.offset}&limit=${page.limit}&selector=${selector}`));
  page.total = r.total;
  page.messages = r.messages;
  const ids = new Set(r.messages.map((m) => m.id));
  for (const id of [...page.selected]) if (!ids.has(id)) page.selected.delete(id);
  renderMessages();
}

function bodyText(b) {
  if (b.text !== undefined) return b.text + (b.truncated ? "…" : "");
  if (b.hex !== undefined) return `${b.length} bytes: ${b.hex}${b.truncated ? "…" : ""}`;
  if (b.map !== undefined) return JSON.stringify(b.map);
  return "";
}

function renderMessages() {
  fill("q-messages", page.messages, (tr, m) => {
    tr.dataset.id = m.id;
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = page.selected.has(m.id);
    box.disabled = m.state === "in flight";
    box.addEventListener("change", () => {
      box.checked ? page.selected.add(m.id) : page.selected.delete(m.id);
      $("q-selected").textContent = page.selected.size;
    });
    const pick = document.createElement("td");
    pick.appendChild(box);
    const props = Object.entries(m.properties || {})
      .filter(([k]) => !k.startsWith("HeraldDeadLetter") && k !== "HeraldOriginalDestination")
      .map(([k, v]) => `${k}=${v}`).join(" ");
    const dead = m.dead_letter || {};
    const body = nameCell(bodyText(m.body || {}));
    body.className = "body";
    const time = cell(m.timestamp);
    time.className = "time";
    const [from, why] = [nameCell(dead.from), nameCell(dead.reason)];
    from.className = why.className = "dl";
    tr.append(pick, nameCell(m.id), cell(m.state), cell(m.priority, true), cell(m.deliveries, true),
      time, from, why, nameCell(props), body);
  });
  const last = Math.min(page.offset + page.messages.length, page.total);
  $("q-page").textContent = page.total
    ? `${page.offset + 1}–${last} of ${page.total}` : "no messages";
  $("q-selected").textContent = page.selected.size;
  $("q-all").checked = false;
}

function showFigures(queues) {
  const q = queues.find((x) => x.name === page.queue);
  $("q-figures").textContent = q
    ? `${q.depth} waiting · ${q.scheduled || 0} scheduled · ${q.in_flight} in flight · ` +
      `${q.consumers} consumer(s) · ${q.enqueued} enqueued · ${q.acknowledged} acknowledged · ` +
      `${q.bytes} bytes in memory · ${q.paged} paged (${q.paged_bytes} bytes on disk)` +
      (q.paging_stopped ? " · paging stopped: publishers wait" : "")
    : "no such queue";
  page.figures = q;
  // Only a dead-letter queue's messages know where to go back to.
  const dead = Boolean(q && q.dead_letter);
  $("q-replay").hidden = !dead;
  $("q-replay-all").hidden = !dead;
  $("q-messages").classList.toggle("plain", !dead);
}

// Runs an action on the selected messages, one request each; says how
// many were done and why any was not, then shows the queue as it is.
async function onSelected(what, request) {
  const ids = [...page.selected];
  if (!ids.length) {
    $("q-result").textContent = "select messages first";
    return;
  }
  if (!window.confirm(`${what} ${ids.length} message(s) of ${page.queue}?`)) return;
  const failed = [];
  for (const id of ids) {
    try {
      await request(id);
    } catch (e) {
      failed.push(`${id}: ${e.message}`);
    }
  }
  page.selected.clear();
  report(`${what}: ${ids.length - failed.length} done`, failed);
  await loadMessages();
}

function report(done, failed) {
  $("q-result").className = failed.length ? "error" : "";
  $("q-result").textContent = failed.length ? `${done}; not done: ${failed.join("; ")}` : done;
}

const messagePath = (id, rest) => queuePath(page.queue, `/messages/${encodeURIComponent(id)}${rest}`);
const relocate = (kind) => async () => {
  const to = $("q-to").value.trim();
  if (!to) {
    report("", [`${kind}: name where to, queue://NAME or topic://NAME`]);
    return;
  }
  const verb = kind === "move" ? "Move" : "Copy";
  await onSelected(`${verb} to ${to}:`, (id) => api("POST", messagePath(id, `/${kind}`), { to }));
};

const guarded = (action) => async () => {
  try {
    await action();
  } catch (e) {
    report("", [e.message]);
  }
};

$("q-delete-messages").addEventListener("click", guarded(() =>
  onSelected("Delete", (id) => api("DELETE", messagePath(id, "")))));
$("q-move").addEventListener("click", guarded(relocate("move")));
$("q-copy").addEventListener("click", guarded(relocate("copy")));
$("q-replay").addEventListener("click", guarded(async () => {
  const ids = [...page.selected];
  if (!ids.length) return report("", ["select messages first"]);
  if (!window.confirm(`Replay ${ids.length} message(s) of ${page.queue} to where each came from?`)) return;
  const r = await api("POST", queuePath(page.queue, "/replay"), { ids });
  page.selected.clear();
  report(`replayed ${r.moved}`, r.failed.map((f) => `${f.id}: ${f.error}`));
  await loadMessages();
}));
$("q-replay-all").addEventListener("click", guarded(async () => {
  const n = page.figures ? page.figures.depth : page.total;
  if (!window.confirm(`Replay all ${n} message(s) of ${page.queue} to where each came from?`)) return;
  const r = await api("POST", queuePath(page.queue, "/replay"));
  report(`replayed ${r.moved}`, []);
  await loadMessages();
}));
$("q-purge").addEventListener("click", guarded(async () => {
  const n = page.figures ? page.figures.depth : 0;
  if (!window.confirm(`Purge queue ${page.queue}? Its ${n} waiting message(s) are dropped.`)) return;
  const r = await api("POST", queuePath(page.queue, "/purge"));
  report(`purged ${r.purged}`, []);
  await loadMessages();
}));
$("q-delete").addEventListener("click", guarded(async () => {
  const q = page.figures || { name: page.queue, depth: 0, in_flight: 0 };
  if (!window.confirm(deleteQuestion(q))) return;
  await api("DELETE", queuePath(page.queue, ""));
  location.hash = "";
}));
$("q-filter").addEventListener("submit", (event) => {
  event.preventDefault();
  page.offset = 0;
  guarded(loadMessages)();
});
$("q-refresh").addEventListener("click", guarded(loadMessages));
$("q-prev").addEventListener("click", guarded(async () => {
  page.offset = Math.max(0, page.offset - page.limit);
  await loadMessages();
}));
$("q-next").addEventListener("click", guarded(async () => {
  if (page.offset + page.limit < page.total) page.offset += page.limit;
  await loadMessages();
}));
$("q-all").addEventListener("change", () => {
  for (const m of page.messages) {
    if (m.state === "in flight") continue;
    $("q-all").checked ? page.selected.add(m.id) : page.selected.delete(m.id);
  }
  renderMessages();
  $("q-all").checked = page.selected.size > 0;
});
window.addEventListener("hashchange", guarded(route));
$("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = `${$("login-user").value}:${$("login-password").value}`;
  // Base64 of the UTF-8 bytes (btoa takes Latin-1 only).
  const candidate = btoa(String.fromCharCode(...new TextEncoder().encode(text)));
  // One request checks it: a wrong password costs one failed login, not
  // one for each of the page's requests.
  const answer = await fetch("/api/health",
    { headers: { "X-Herald": "console", Authorization: `Basic ${candidate}` } });
  if (answer.status === 401) {
    $("login-error").textContent = (await answer.json()).error;
    return;
  }
  login = candidate;
  sessionStorage.setItem("herald-login", login);
  $("login-password").value = "";
  $("login-error").textContent = "";
  showLogin(false);
  refresh().catch(() => {});
});
$("logout").addEventListener("click", (event) => {
  event.preventDefault();
  logOut("");
});
for (const id of ["chart-window", "q-window", "t-window"]) {
  $(id).addEventListener("change", () => refresh().catch(() => {}));
}

async function loop() {
  try {
    // Nothing to ask while the login form waits.
    if ($("login-page").hidden) await refresh();
    $("error").textContent = "";
  } catch (e) {
    // The login form says what is wrong there.
    $("error").textContent = $("login-page").hidden ? e.message : "";
  }
  setTimeout(loop, 1000);
}
$("logout").hidden = !login;
guarded(route)();
loop();
