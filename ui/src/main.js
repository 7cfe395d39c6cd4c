// The memory explorer: sign in with an API key, search, walk the graph, read, curate, and (for
// admin keys) see the SQL and plan of each verb. Everything goes through the REST verbs.
import "./explorer.css";
import { api, capabilities, key, whenUnauthorized } from "./api.js";
import { $, $$, el, names, text } from "./dom.js";
import { Graph, relColour, typeStyle } from "./graph.js";
import { renderReport } from "./plan.js";
import { Reader } from "./read.js";

const ROUND_BUDGET = 3;

const state = {
  caps: { write: false, admin: false },
  rounds: 0,
  selected: [], // result ids chosen as seeds, in the order chosen
  search: null, // the last search request and answer
  walk: null, // the last expand request
  current: null, // the slice answer on the Read pane
  previous: null, // the memory read before it (the other end of a link)
  edit: null, // { id, revision, name, lifecycle, content } as loaded for editing
};

const status = $("#status");
function say(message) {
  status.textContent = message;
}

// --- sign-in -----------------------------------------------------------------------------

function showSignIn(message = "") {
  state.caps = { write: false, admin: false };
  $("#app-view").hidden = true;
  $("#signin-view").hidden = false;
  $("#sign-out").hidden = true;
  $("#who").textContent = "";
  $("#signin-error").textContent = message;
  $("#signin-key").value = "";
  $("#signin-key").focus();
  document.documentElement.dataset.view = "signin";
}

async function showApp() {
  let caps;
  try {
    caps = await capabilities();
  } catch (error) {
    key.clear();
    showSignIn(error.status === 401 ? "This key is not valid (unknown or revoked)." : error.detail);
    return;
  }
  state.caps = caps;
  const can = ["reads", caps.write ? "writes" : null, caps.admin ? "sees plans (admin)" : null].filter(Boolean);
  $("#who").textContent = `Signed in: this key ${can.join(", ")}`;
  $("#tab-curate").hidden = !caps.write;
  $("#tab-plan").hidden = !caps.admin;
  $("#signin-view").hidden = true;
  $("#app-view").hidden = false;
  $("#sign-out").hidden = false;
  document.documentElement.dataset.view = "app";
  $("#search-query").focus();
  performance.mark("explorer-app");
  graph.load().then(() => {
    performance.mark("explorer-graph");
    document.documentElement.dataset.graph = "ready";
  });
}

$("#signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const value = $("#signin-key").value.trim();
  $("#signin-key").value = "";
  if (!value) {
    $("#signin-error").textContent = "Paste an API key.";
    return;
  }
  $("#signin-error").textContent = "";
  key.set(value);
  await showApp();
});

$("#sign-out").addEventListener("click", () => {
  key.clear();
  resetAll();
  showSignIn("Signed out: the key is gone from this tab.");
});

whenUnauthorized(() => {
  key.clear();
  resetAll();
  showSignIn("The service refused the key (revoked?): sign in again.");
});

function resetAll() {
  state.rounds = 0;
  state.selected = [];
  state.search = null;
  state.walk = null;
  state.current = null;
  state.edit = null;
  graph.clear();
  $("#results").replaceChildren();
  $("#search-filters").replaceChildren();
  $("#search-summary").textContent = "";
  reader.clear("Open a search result or a node to read it.");
  updateRounds();
  $("#walk-flags").replaceChildren();
}

// --- search ------------------------------------------------------------------------------

function searchBody(form, offset = 0) {
  const data = new FormData(form);
  const lifecycle = data.getAll("lifecycle");
  return {
    query: String(data.get("query") || "").trim(),
    types: names(data.get("types")),
    project: String(data.get("project") || "").trim() || undefined,
    lifecycle: lifecycle.length ? lifecycle : undefined,
    limit: Number(data.get("limit")) || undefined,
    offset: offset || undefined,
  };
}

$("#search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  runSearch(searchBody(event.currentTarget), false);
});

$("#search-more").addEventListener("click", () => {
  const last = state.search;
  if (last) runSearch({ ...last.body, offset: last.answer.offset + last.answer.total }, true);
});

// Each search, walk and read carries a ticket: an answer that comes back after a newer request
// was sent is dropped, so a slow answer never replaces the one the user asked for last.
let searchTicket = 0;
let walkTicket = 0;

async function runSearch(body, append) {
  if (!body.query) return;
  const ticket = ++searchTicket;
  say(`Searching for “${body.query}”…`);
  try {
    const { data } = await api.search(body);
    if (ticket !== searchTicket) return;
    state.search = { body, answer: data };
    renderFilters($("#search-filters"), data.filters);
    const first = append ? $$("#results > li").length : 0;
    $("#search-summary").textContent = `${first + data.total} result(s)${data.has_more ? ", more available" : ""}`;
    const items = data.results.map((r, i) => resultItem(r, first + i));
    if (append) $("#results").append(...items);
    else $("#results").replaceChildren(...items);
    $("#search-more").hidden = !data.has_more;
    say(`${data.total} result(s) for “${body.query}”`);
  } catch (error) {
    if (ticket !== searchTicket) return;
    $("#search-summary").textContent = error.detail;
    say(`Search failed: ${error.detail}`);
  }
}

function renderFilters(target, filters) {
  const shown = [];
  for (const [name, value] of Object.entries(filters || {})) {
    if (value === null || value === undefined) continue;
    let said = Array.isArray(value) ? value.join(", ") : typeof value === "object" ? JSON.stringify(value) : String(value);
    if (typeof value === "boolean") said = value ? "yes" : "no";
    const flag = (name.endsWith("_capped") && value === true) || name === "lanes";
    shown.push(el("div", { class: flag ? "filter flag" : "filter" }, [el("dt", {}, [text(name.replaceAll("_", " "))]), el("dd", {}, [text(said)])]));
  }
  target.replaceChildren(
    el("details", { class: "filters-box" }, [
      el("summary", {}, [text(filterSummary(filters))]),
      el("dl", {}, shown),
    ]),
  );
}

function filterSummary(filters) {
  if (!filters) return "Filters";
  const parts = [];
  if ("candidates_capped" in filters) parts.push(filters.candidates_capped ? "candidates capped" : "not capped");
  if (filters.lanes) {
    const lanes = Array.isArray(filters.lanes) || typeof filters.lanes !== "object"
      ? [].concat(filters.lanes)
      : Object.entries(filters.lanes).filter(([, lane]) => lane && lane.ran).map(([name]) => name);
    parts.push(`lanes: ${lanes.join(", ")}`);
  }
  if (filters.word_weights) parts.push(`weights: ${filters.word_weights}`);
  if (filters.frontier_capped !== undefined) parts.push(filters.frontier_capped ? "frontier capped" : "frontier not capped");
  return `Filters applied${parts.length ? `: ${parts.join(" · ")}` : ""}`;
}

function resultItem(r, index) {
  graph.remember(r.id, { type: r.type, name: r.name, lifecycle: r.lifecycle, project_id: r.project_id, parent_entity_id: r.parent_entity_id });
  const focus = r.metadata && r.metadata.focus;
  const excerpt = (focus && focus.excerpt) || r.content;
  const box = el("input", { type: "checkbox", id: `pick-${index}`, checked: state.selected.includes(r.id) });
  box.addEventListener("change", () => {
    if (box.checked && !state.selected.includes(r.id)) state.selected.push(r.id);
    if (!box.checked) state.selected = state.selected.filter((id) => id !== r.id);
    $("#expand-seeds").value = state.selected.join(", ");
  });
  const open = el("button", { type: "button", class: "link result-name" }, [text(r.name)]);
  open.addEventListener("click", () => openMemory(r.id));
  const expand = el("button", { type: "button", class: "quiet small" }, [text("Expand")]);
  expand.addEventListener("click", () => expandFrom([r.id]));
  const [colour] = typeStyle(r.type);
  const typeBadge = el("span", { class: "badge type" }, [text(r.type)]);
  typeBadge.style.setProperty("--type", colour); // CSSOM: no inline style attribute (the CSP)
  return el("li", { class: "result", "data-id": r.id }, [
    el("div", { class: "result-head" }, [
      box,
      el("label", { for: `pick-${index}`, class: "sr-only" }, [text(`Use ${r.id} as a seed`)]),
      open,
    ]),
    el("p", { class: "meta" }, [
      typeBadge,
      el("span", { class: `badge lifecycle ${r.lifecycle}` }, [text(r.lifecycle)]),
      r.parent_entity_id
        ? el("span", { class: "badge passage" }, [text(`passage ${r.passage_index + 1} of ${r.parent_entity_id}`)])
        : el("span", { class: "badge" }, [text("memory")]),
      el("code", { class: "result-id" }, [text(r.id)]),
    ]),
    el("p", { class: "excerpt" }, [text(excerpt.length > 360 ? `${excerpt.slice(0, 360)}…` : excerpt)]),
    el("div", { class: "row" }, [expand]),
  ]);
}

// --- walk ------------------------------------------------------------------------------------

function updateRounds() {
  const over = state.rounds > ROUND_BUDGET;
  const out = $("#rounds");
  out.textContent = `Rounds: ${state.rounds} of ${ROUND_BUDGET}${over ? " (past the agents' budget)" : ""}`;
  out.classList.toggle("over", over);
}

function expandBody(seeds) {
  const form = $("#expand-form");
  const data = new FormData(form);
  return {
    entity_ids: seeds,
    depth: Number(data.get("depth")) || undefined,
    limit: Number(data.get("limit")) || undefined,
    include_incoming: data.get("include_incoming") === "on",
    relationship_types: names(data.get("relationship_types")),
    types: names(data.get("types")),
    project: String(data.get("project") || "").trim() || undefined,
  };
}

$("#expand-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const seeds = names($("#expand-seeds").value);
  if (!seeds) {
    say("Choose seeds: tick search results, or type ids.");
    $("#expand-seeds").focus();
    return;
  }
  expandFrom(seeds);
});

$("#graph-arrange").addEventListener("click", () => graph.arrange());
$("#graph-fit").addEventListener("click", () => graph.fit());

$("#graph-clear").addEventListener("click", () => {
  graph.clear();
  state.rounds = 0;
  state.walk = null;
  updateRounds();
  $("#walk-flags").replaceChildren();
  say("Graph cleared; rounds start again at 0.");
});

async function expandFrom(seeds) {
  const body = expandBody(seeds);
  const ticket = ++walkTicket;
  say(`Expanding ${seeds.join(", ")}…`);
  try {
    const { data } = await api.expand(body);
    if (ticket === walkTicket) state.walk = body; // the plan explains the newest walk
    const added = await graph.addWalk(data);
    renderWalkFlags(data);
    state.rounds += 1;
    updateRounds();
    say(
      `Walk from ${data.origins.join(", ") || "nothing"}: ${data.total} neighbour(s), ${added} new node(s) drawn` +
        (data.unresolved.length ? `; unresolved: ${data.unresolved.join(", ")}` : ""),
    );
    if (!$("#panel-plan").hidden) explainLast();
  } catch (error) {
    say(`Expand failed: ${error.detail}`);
    $("#walk-flags").replaceChildren(el("span", { class: "badge no", role: "alert" }, [text(error.detail)]));
  }
}

function renderWalkFlags(data) {
  const f = data.filters || {};
  const flag = (on, yes, no, id) => el("span", { class: on ? "badge flag" : "badge", id }, [text(on ? yes : no)]);
  $("#walk-flags").replaceChildren(
    flag(data.truncated, `truncated: more than ${data.limit} existed`, "not truncated", "flag-truncated"),
    flag(f.frontier_capped, "frontier capped: a cap cut the walk", "frontier not capped (exact)", "flag-frontier"),
    el("span", { class: "badge" }, [text(`depth ${data.depth} · limit ${data.limit}`)]),
    ...(data.unresolved.length
      ? [el("span", { class: "badge no", id: "flag-unresolved" }, [text(`unresolved: ${data.unresolved.join(", ")}`)])]
      : []),
  );
}

function renderNodes() {
  const nodes = graph.nodes();
  $("#node-list-title").textContent = `Nodes (${nodes.length})`;
  $("#graph").dataset.nodes = String(nodes.length);
  $("#graph").setAttribute("aria-label", `Neighbourhood graph: ${nodes.length} nodes`);
  const rows = nodes.map((n) => {
    const open = el("button", { type: "button", class: "link" }, [text(n.id)]);
    open.addEventListener("click", () => openMemory(n.id));
    const expand = el("button", { type: "button", class: "quiet small", "aria-label": `Expand from ${n.id}` }, [text("Expand")]);
    expand.addEventListener("click", () => expandFrom([n.id]));
    const r = n.reached;
    const how = n.origin && !r ? "seed" : r ? `${r.relationship} (${r.direction})` : "";
    return el("tr", { "data-id": n.id }, [
      el("td", {}, [open, n.name ? el("span", { class: "node-name" }, [text(n.name)]) : null]),
      el("td", {}, [text(n.type || "")]),
      el("td", {}, [text(how)]),
      el("td", { class: "num" }, [text(n.origin && !r ? "0" : r ? String(r.distance) : "")]),
      el("td", {}, [expand]),
    ]);
  });
  $("#node-list tbody").replaceChildren(...rows);
  renderLegend();
}

function renderLegend() {
  const items = [];
  for (const type of graph.types()) {
    const [colour, shape] = typeStyle(type);
    const swatch = el("span", { class: `swatch shape-${shape}`, "aria-hidden": "true" });
    swatch.style.background = colour;
    items.push(el("li", {}, [swatch, text(type)]));
  }
  for (const rel of graph.relationships()) {
    const line = el("span", { class: "line", "aria-hidden": "true" });
    line.style.background = relColour(rel);
    items.push(el("li", {}, [line, text(rel)]));
  }
  $("#legend").replaceChildren(
    items.length
      ? el("ul", {}, [
          ...items,
          el("li", {}, [text("thick border: seed · dashed edge: last hop of a 2-3 hop path · dashed node: superseded")]),
        ])
      : "",
  );
}

// --- read --------------------------------------------------------------------------------------

function openMemory(id) {
  graph.select(id);
  selectTab($("#tab-read"));
  return reader.open(id);
}

$("#open-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = $("#open-id").value.trim();
  if (id) openMemory(id);
});

function opened(answer) {
  if (answer && state.current && state.current.parent_id !== answer.parent_id) state.previous = state.current.parent_id;
  state.current = answer;
  if (answer) {
    graph.remember(answer.parent_id, { name: answer.parent_name, type: answer.parent_type, project_id: answer.project_id });
    $("#link-src").value = answer.parent_id;
    if (state.previous && !$("#link-dst").value) $("#link-dst").value = state.previous;
  }
  if (!$("#panel-curate").hidden) loadEdit();
  if (!$("#panel-plan").hidden && $("#plan-verb").value === "slice") explainLast();
}

// --- curate ----------------------------------------------------------------------------------

const editMessage = $("#edit-message");

function setEditMessage(message, kind = "") {
  editMessage.textContent = message;
  editMessage.className = `message ${kind}`;
}

async function loadEdit() {
  const id = state.current && state.current.parent_id;
  if (!id) {
    $("#edit-form").hidden = true;
    $("#curate-empty").hidden = false;
    return;
  }
  try {
    const { data } = await api.entity(id);
    state.edit = { id, revision: data.revision, name: data.name, lifecycle: data.lifecycle, content: data.content };
    $("#edit-id").textContent = id;
    $("#edit-revision").textContent = `revision ${data.revision}`;
    $("#edit-name").value = data.name;
    $("#edit-lifecycle").value = data.lifecycle;
    $("#edit-content").value = data.content;
    $("#edit-form").hidden = false;
    $("#curate-empty").hidden = true;
    setEditMessage("");
  } catch (error) {
    state.edit = null;
    $("#edit-form").hidden = true;
    $("#curate-empty").hidden = false;
    $("#curate-empty").textContent = error.status === 404 ? "Entity not found" : error.detail;
  }
}

$("#edit-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const loaded = state.edit;
  if (!loaded) return;
  const patch = {};
  const name = $("#edit-name").value;
  const lifecycle = $("#edit-lifecycle").value;
  const content = $("#edit-content").value;
  if (name !== loaded.name) patch.name = name;
  if (lifecycle !== loaded.lifecycle) patch.lifecycle = lifecycle;
  if (content !== loaded.content) patch.content = content;
  if (Object.keys(patch).length === 0) {
    setEditMessage("Nothing changed.");
    return;
  }
  try {
    const { data } = await api.update(loaded.id, patch, loaded.revision);
    state.edit = { id: loaded.id, revision: data.revision, name: data.name, lifecycle: data.lifecycle, content: data.content };
    $("#edit-revision").textContent = `revision ${data.revision}`;
    setEditMessage(`Saved: revision ${data.revision}.`, "ok");
    graph.remember(loaded.id, { name: data.name, lifecycle: data.lifecycle });
    say(`Saved ${loaded.id}`);
  } catch (error) {
    if (error.status === 412) {
      setEditMessage("Changed by someone else: reload to see their version (your edits are kept in the form until then).", "conflict");
      $("#edit-reload").focus();
    } else setEditMessage(error.status === 404 ? "Entity not found" : error.detail, "error");
  }
});

$("#edit-reload").addEventListener("click", async () => {
  await loadEdit();
  setEditMessage(`Reloaded: revision ${state.edit ? state.edit.revision : "?"}.`);
});

$("#edit-delete").addEventListener("click", () => {
  const loaded = state.edit;
  if (!loaded) return;
  $("#delete-text").textContent =
    `Delete ${loaded.id} (“${loaded.name}”, revision ${loaded.revision}) with its passages, edges and mentions? This cannot be undone.`;
  const dialog = $("#delete-dialog");
  dialog.returnValue = "";
  dialog.showModal();
});

$("#delete-dialog").addEventListener("close", async () => {
  const loaded = state.edit;
  if ($("#delete-dialog").returnValue !== "delete" || !loaded) {
    $("#edit-delete").focus();
    return;
  }
  try {
    await api.remove(loaded.id, loaded.revision);
    graph.removeNode(loaded.id);
    state.edit = null;
    state.current = null;
    $("#edit-form").hidden = true;
    $("#curate-empty").hidden = false;
    $("#curate-empty").textContent = `Deleted ${loaded.id}.`;
    reader.clear(`Deleted ${loaded.id}.`);
    say(`Deleted ${loaded.id}`);
  } catch (error) {
    setEditMessage(error.status === 412 ? "Changed by someone else: reload." : error.detail, "conflict");
  }
});

$("#link-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const src = $("#link-src").value.trim();
  const rel = $("#link-rel").value.trim().toUpperCase();
  const dst = $("#link-dst").value.trim();
  const message = $("#link-message");
  try {
    const { status: code } = await api.link(src, rel, dst);
    const drawn = graph.addLink(src, rel, dst);
    message.className = "message ok";
    message.textContent = `${code === 201 ? "Linked" : "Already linked"}: ${src} -${rel}-> ${dst}${drawn ? "" : " (not on the graph)"}.`;
  } catch (error) {
    message.className = "message error";
    message.textContent = error.status === 404 ? "Entity not found" : error.detail;
  }
});

// --- plan (admin keys) -------------------------------------------------------------------------

async function explainLast() {
  const verb = $("#plan-verb").value;
  const body = verb === "expand" ? state.walk : verb === "search" ? state.search && state.search.body : reader.lastRequest;
  const target = $("#plan");
  if (!body) {
    target.replaceChildren(el("p", { class: "help" }, [text(`Nothing to explain yet: run a ${verb === "expand" ? "walk" : verb === "search" ? "search" : "read"} first.`)]));
    return;
  }
  target.replaceChildren(el("p", { class: "help" }, [text("Explaining…")]));
  try {
    const { data } = await api.explain(verb, body);
    renderReport(target, data);
  } catch (error) {
    target.replaceChildren(el("p", { class: "notice", role: "alert" }, [text(error.detail)]));
  }
}

$("#plan-run").addEventListener("click", explainLast);

// --- tabs ----------------------------------------------------------------------------------------

function selectTab(tab) {
  for (const t of $$('[role="tab"]')) {
    const on = t === tab;
    t.setAttribute("aria-selected", String(on));
    t.tabIndex = on ? 0 : -1;
    $(`#${t.getAttribute("aria-controls")}`).hidden = !on;
  }
  // the plan's table wants room: the side pane widens while it shows
  $("#app-view").classList.toggle("plan-wide", tab.id === "tab-plan");
  if (tab.id === "tab-curate") loadEdit();
  if (tab.id === "tab-plan") explainLast();
}

for (const tab of $$('[role="tab"]')) {
  tab.addEventListener("click", () => selectTab(tab));
  tab.addEventListener("keydown", (event) => {
    const tabs = $$('[role="tab"]').filter((t) => !t.hidden);
    const at = tabs.indexOf(tab);
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    const next = tabs[(to + tabs.length) % tabs.length];
    next.focus();
    selectTab(next);
  });
}

// --- start -------------------------------------------------------------------------------------

const graph = new Graph($("#graph"), {
  onOpen: (id) => openMemory(id),
  onExpand: (id) => expandFrom([id]),
  onChange: renderNodes,
});
const reader = new Reader($("#read"), {
  onOpened: opened,
  onExpand: (id) => expandFrom([id]),
  say,
});

// a handle for the end-to-end tests and the benchmark: what is drawn, and where
window.sibylExplorer = {
  nodes: () => graph.nodes().map((n) => n.id),
  position: (id) => graph.position(id),
  graph: () => graph.cy,
};

updateRounds();
if (key.get()) showApp();
else showSignIn();
performance.mark("explorer-ready");
document.documentElement.dataset.ready = "true";
