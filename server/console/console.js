// The Herald console: polls the management API once a second and renders
// it; the forms and buttons call the same API. No build step.
"use strict";

const $ = (id) => document.getElementById(id);

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    // X-Herald: a change a plain cross-site form could not make.
    headers: body
      ? { "Content-Type": "application/json", "X-Herald": "console" }
      : { "X-Herald": "console" },
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = await response.json();
  if (!response.ok) {
    throw new Error(data.error || response.statusText);
  }
  return data;
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

function drawChart(history) {
  const canvas = $("chart");
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (history.length < 2) return;
  const max = Math.max(1, ...history.map((s) => Math.max(s.in_rate, s.out_rate)));
  const x = (i) => (i / (history.length - 1)) * (canvas.width - 50);
  const y = (v) => canvas.height - 5 - (v / max) * (canvas.height - 20);
  for (const [key, color] of [["in_rate", "#1f77b4"], ["out_rate", "#ff7f0e"]]) {
    ctx.beginPath();
    ctx.strokeStyle = color;
    history.forEach((s, i) => (i ? ctx.lineTo(x(i), y(s[key])) : ctx.moveTo(x(i), y(s[key]))));
    ctx.stroke();
  }
  ctx.fillStyle = "#555";
  ctx.fillText(max.toFixed(0) + "/s", canvas.width - 45, 12);
}

async function refresh() {
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
    tr.append(nameCell(q.name), cell(q.depth, true), cell(q.in_flight, true), cell(q.consumers, true),
      cell(rate(q.enqueue_rate), true), cell(rate(q.dequeue_rate), true),
      button("Purge", () => api("POST", `/api/queues/${encodeURIComponent(q.name)}/purge`),
        `Purge queue ${q.name}? Its ${q.depth} waiting message(s) are dropped.`));
    tr.children[1].classList.add("depth");
  });
  fill("topics", topics.topics, (tr, t) => {
    tr.dataset.topic = t.name;
    tr.append(nameCell(t.name), cell(t.messages_in, true), cell(t.deliveries, true), cell(rate(t.rate), true));
  });
  fill("patterns", topics.patterns, (tr, p) => tr.append(nameCell(p.pattern), cell(p.subscribers, true)));
  fill("subscriptions", subscriptions, (tr, s) => {
    tr.append(cell(s.kind), nameCell(s.pattern), nameCell(s.selector), nameCell(s.name),
      nameCell(s.client_id), cell(s.connection), cell(s.backlog, true));
    tr.append(s.durable && s.connection === null
      ? button("Delete", () => api("DELETE",
          `/api/subscriptions/${encodeURIComponent(s.client_id)}/${encodeURIComponent(s.name)}`),
        `Delete durable subscription ${s.name} of ${s.client_id}? Its ${s.backlog} waiting message(s) go with it.`)
      : cell(""));
  });
  fill("connections", connections, (tr, c) => {
    tr.dataset.connection = c.id;
    tr.append(cell(c.id, true), nameCell(c.client_id), nameCell(c.user), cell(c.peer), cell(c.protocol),
      cell(c.subscriptions, true), cell(c.bytes_in, true), cell(c.bytes_out, true),
      button("Close", () => api("DELETE", `/api/connections/${c.id}`),
        `Close connection ${c.id} (${c.client_id || c.peer})? Its client is disconnected.`));
  });
  drawChart(history);
}

$("publish").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const result = await api("POST", "/api/publish", {
      destination: $("publish-destination").value,
      body: $("publish-body").value,
      persistent: $("publish-persistent").checked,
    });
    $("publish-result").textContent = `published to ${result.destination}: ${result.delivered} delivered`;
    await refresh();
  } catch (e) {
    $("publish-result").textContent = `refused: ${e.message}`;
  }
});

async function loop() {
  try {
    await refresh();
    $("error").textContent = "";
  } catch (e) {
    $("error").textContent = e.message;
  }
  setTimeout(loop, 1000);
}
loop();
