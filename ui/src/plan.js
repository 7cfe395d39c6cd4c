// The DBA view: each statement a verb sent, its SQL and bound values, and its
// EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) plan as a table, one row per plan node, indented by
// depth, with the node's time and buffers as numbers and bars so the costly nodes stand out.

import { el, text } from "./dom.js";

function label(node) {
  const parts = [node["Node Type"]];
  if (node["Index Name"]) parts.push(`using ${node["Index Name"]}`);
  if (node["Relation Name"]) parts.push(`on ${node["Relation Name"]}${node.Alias && node.Alias !== node["Relation Name"] ? ` ${node.Alias}` : ""}`);
  else if (node["CTE Name"]) parts.push(`on ${node["CTE Name"]}${node.Alias ? ` ${node.Alias}` : ""}`);
  else if (node["Function Name"]) parts.push(`${node["Function Name"]}()`);
  if (node["Subplan Name"]) parts.push(`[${node["Subplan Name"]}]`);
  return parts.join(" ");
}

/** The plan's nodes in order, each with its depth, inclusive and own time (ms) and buffers. */
export function flatten(root) {
  const rows = [];
  const visit = (node, depth) => {
    const loops = node["Actual Loops"] ?? 0;
    const total = (node["Actual Total Time"] ?? 0) * loops;
    const children = node.Plans || [];
    // own time: inclusive time less that of the children run inside it (InitPlans and
    // SubPlans are counted under the node that runs them, as PostgreSQL reports them)
    const inner = children.reduce((s, c) => s + (c["Actual Total Time"] ?? 0) * (c["Actual Loops"] ?? 0), 0);
    // buffers are counted into every node above: a node's own are its count less its children's
    const blocks = (n) => (n["Shared Hit Blocks"] ?? 0) + (n["Shared Read Blocks"] ?? 0);
    const ownBlocks = blocks(node) - children.reduce((s, c) => s + blocks(c), 0);
    const row = {
      depth,
      label: label(node),
      loops,
      rows: node["Actual Rows"] ?? 0,
      planRows: node["Plan Rows"] ?? 0,
      total,
      self: Math.max(0, total - inner),
      hit: node["Shared Hit Blocks"] ?? 0,
      read: node["Shared Read Blocks"] ?? 0,
      own: Math.max(0, ownBlocks),
      temp: (node["Temp Read Blocks"] ?? 0) + (node["Temp Written Blocks"] ?? 0),
      never: loops === 0,
    };
    rows.push(row);
    for (const child of children) visit(child, depth + 1);
  };
  visit(root, 0);
  return rows;
}

const ms = (value) => (value >= 100 ? value.toFixed(0) : value >= 1 ? value.toFixed(2) : value.toFixed(3));

function bar(value, max, kind) {
  const share = max > 0 ? Math.max(value > 0 ? 2 : 0, Math.round((100 * value) / max)) : 0;
  const b = el("span", { class: `bar ${kind}`, "aria-hidden": "true" });
  b.style.width = `${share}%`;
  return b;
}

function cell(value, max, kind, shown) {
  return el("td", { class: "num" }, [el("span", { class: "bar-track", "aria-hidden": "true" }, [bar(value, max, kind)]), text(shown)]);
}

function planTable(statement, doc) {
  const rows = flatten(doc.Plan);
  const maxTime = Math.max(0, ...rows.map((r) => r.self));
  const maxBuffers = Math.max(0, ...rows.map((r) => r.own));
  const table = el("table", { class: "plan-table" }, [
    el("caption", {}, [text(`Plan of ${statement.name}: ${rows.length} nodes`)]),
    el("thead", {}, [
      el("tr", {}, [
        el("th", { scope: "col" }, [text("Node")]),
        el("th", { scope: "col", class: "num" }, [text("Rows × loops")]),
        el("th", { scope: "col", class: "num", title: "Time spent in this node itself, all loops" }, [text("Own ms")]),
        el("th", { scope: "col", class: "num", title: "Time including the nodes below, all loops" }, [text("Total ms")]),
        el("th", { scope: "col", class: "num", title: "Shared buffers found in PostgreSQL's cache, this node and those below (the bar: this node's own)" }, [text("Shared hit")]),
        el("th", { scope: "col", class: "num", title: "Shared buffers read from the OS or disk" }, [text("Shared read")]),
      ]),
    ]),
  ]);
  const body = el("tbody");
  for (const r of rows) {
    const name = el("th", { scope: "row", class: "plan-node" }, [text(r.label)]);
    name.style.paddingLeft = `${0.3 + r.depth * 0.9}em`;
    const tr = el("tr", { class: r.never ? "never" : r.read > 0 ? "reads" : "" }, [
      name,
      el("td", { class: "num" }, [text(r.never ? "never executed" : `${r.rows} × ${r.loops}`)]),
      cell(r.self, maxTime, "time", ms(r.self)),
      el("td", { class: "num" }, [text(ms(r.total))]),
      cell(r.own, maxBuffers, "hit", String(r.hit)),
      el("td", { class: "num" }, [text(String(r.read))]),
    ]);
    body.append(tr);
  }
  table.append(body);

  const hot = [...rows].sort((a, b) => b.self - a.self)[0];
  const heavy = [...rows].sort((a, b) => b.own - a.own)[0];
  const hits = rows[0].hit;
  const reads = rows[0].read;
  const summary = el("p", { class: "plan-summary" }, [
    text(
      `Execution ${ms(doc["Execution Time"] ?? 0)} ms, planning ${ms(doc["Planning Time"] ?? 0)} ms; ` +
        `shared buffers: ${hits} hit, ${reads} read. ` +
        (hot ? `Most time: ${hot.label} (${ms(hot.self)} ms). ` : "") +
        (heavy && heavy.own > 0 ? `Most buffers of its own: ${heavy.label} (${heavy.own}).` : ""),
    ),
  ]);
  return [summary, el("div", { class: "table-scroll" }, [table])];
}

function parameters(statement) {
  const table = el("table", { class: "params" }, [
    el("caption", { class: "sr-only" }, [text("Bound values")]),
    el("thead", {}, [el("tr", {}, ["$n", "name", "type", "value"].map((h) => el("th", { scope: "col" }, [text(h)])))]),
  ]);
  const body = el("tbody");
  for (const p of statement.parameters) {
    const value = JSON.stringify(p.value);
    body.append(
      el("tr", {}, [
        el("td", {}, [text(`$${p.position}`)]),
        el("td", {}, [text(p.name || "?")]),
        el("td", {}, [text(p.type)]),
        el("td", { class: "value" }, [text(value && value.length > 160 ? `${value.slice(0, 160)}…` : String(value))]),
      ]),
    );
  }
  table.append(body);
  return table;
}

/** Render an explain report (format=json) into `target`. */
export function renderReport(target, report) {
  const parts = [
    el("p", { class: "plan-head" }, [
      text(`${report.verb}: ${report.statements.length} statement(s), ${report.plan_mode} plan, outcome ${report.outcome}`),
    ]),
  ];
  if (report.figures !== "measured") {
    parts.push(
      el("p", { class: "notice" }, [
        text(
          "No plan over REST on this service: PostgreSQL measures plans over every org's rows, " +
            "so the operator shows them only where the database holds one org " +
            "(SIBYL_REST_EXPLAIN=measured). The SQL and its values are below; " +
            "`sibyl-pg explain` prints the plan.",
        ),
      ]),
    );
  }
  report.statements.forEach((statement, i) => {
    const section = el("section", { class: "statement", "aria-label": statement.name }, [
      el("h3", {}, [text(`${i + 1}. ${statement.name}`)]),
    ]);
    const doc = Array.isArray(statement.plan) ? statement.plan[0] : null;
    if (doc && doc.Plan) section.append(...planTable(statement, doc));
    section.append(
      el("details", { class: "sql" }, [
        el("summary", {}, [text(`SQL (${statement.sql.split("\n").length} lines) and ${statement.parameters.length} bound values`)]),
        el("pre", {}, [el("code", {}, [text(statement.sql)])]),
        parameters(statement),
      ]),
    );
    parts.push(section);
  });
  target.replaceChildren(...parts);
}
