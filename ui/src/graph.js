// The neighbourhood drawn with Cytoscape.js: one node per memory (colour and shape by type),
// one edge per hop the walk reported (colour by relationship, arrow in the stored direction).
//
// What expand_neighbors says about a neighbour is its distance, and the relationship and
// direction of its best last hop; it does not name the node that hop came from. So:
// - a neighbour at distance 1 of a walk from one seed is joined to that seed, the arrow as the
//   stored edge runs (outgoing: seed → neighbour; incoming: neighbour → seed);
// - a neighbour at distance 2 or 3 is joined to the seed by a dashed edge labelled with its
//   last hop and distance (the nodes in between are elsewhere in the answer, or past `limit`);
// - a walk from several seeds gets a small grey hub joined to its seeds, and its neighbours
//   are joined to the hub, since the answer does not say which seed reached them.
// Nodes are laid out in rings around the first seed drawn, a ring per hop.

const TYPE_STYLE = {
  decision: ["#2563eb", "ellipse"],
  document: ["#059669", "round-rectangle"],
  procedure: ["#d97706", "hexagon"],
  passage: ["#7c3aed", "round-diamond"],
  note: ["#db2777", "round-tag"],
  task: ["#dc2626", "round-triangle"],
  person: ["#0891b2", "octagon"],
  observation: ["#65a30d", "barrel"],
  artifact: ["#4f46e5", "round-pentagon"],
  plan: ["#b45309", "rhomboid"],
  memory: ["#64748b", "ellipse"],
};
const SPARE_COLOURS = ["#0f766e", "#9333ea", "#be123c", "#1d4ed8", "#a16207", "#15803d"];
const SPARE_SHAPES = ["ellipse", "round-rectangle", "hexagon", "octagon", "barrel", "vee"];
const REL_COLOURS = [
  "#1e40af", "#047857", "#b45309", "#7e22ce", "#be185d", "#0e7490",
  "#4d7c0f", "#9a3412", "#374151", "#6d28d9",
];

function hash(text) {
  let h = 0;
  for (const ch of text) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return h;
}

export function typeStyle(type) {
  if (TYPE_STYLE[type]) return TYPE_STYLE[type];
  const h = hash(type);
  return [SPARE_COLOURS[h % SPARE_COLOURS.length], SPARE_SHAPES[(h >> 3) % SPARE_SHAPES.length]];
}

export function relColour(rel) {
  return REL_COLOURS[hash(rel) % REL_COLOURS.length];
}

const STYLE = [
  {
    selector: "node",
    style: {
      label: "data(label)",
      "background-color": "data(colour)",
      shape: "data(shape)",
      width: 26,
      height: 26,
      color: "#111827",
      "font-size": 10,
      "text-valign": "bottom",
      "text-margin-y": 3,
      "text-wrap": "ellipsis",
      "text-max-width": 110,
      "text-background-color": "#ffffff",
      "text-background-opacity": 0.8,
      "text-background-padding": 1,
      "min-zoomed-font-size": 7,
      "border-width": 1,
      "border-color": "#1f2937",
    },
  },
  { selector: "node.origin", style: { "border-width": 4, "border-color": "#111827", width: 34, height: 34 } },
  { selector: "node.superseded", style: { "border-style": "dashed", "background-opacity": 0.55 } },
  {
    selector: "node.hub",
    style: { shape: "diamond", width: 14, height: 14, "background-color": "#9ca3af", label: "data(label)", "font-size": 8 },
  },
  { selector: "node:selected", style: { "border-width": 5, "border-color": "#f59e0b" } },
  { selector: "node.marked", style: { "overlay-color": "#f59e0b", "overlay-opacity": 0.25, "overlay-padding": 6 } },
  {
    selector: "edge",
    style: {
      width: 1.6,
      "curve-style": "bezier",
      "line-color": "data(colour)",
      "target-arrow-color": "data(colour)",
      "target-arrow-shape": "triangle",
      "arrow-scale": 0.9,
      label: "data(label)",
      "font-size": 8,
      color: "#374151",
      "text-rotation": "autorotate",
      "text-background-color": "#ffffff",
      "text-background-opacity": 0.85,
      "min-zoomed-font-size": 8,
    },
  },
  { selector: "edge.far", style: { "line-style": "dashed", width: 1.2 } },
  { selector: "edge.seedlink", style: { "line-color": "#9ca3af", "target-arrow-shape": "none", "line-style": "dotted", label: "" } },
  { selector: "edge.written", style: { width: 2.6 } },
];

export class Graph {
  constructor(container, { onOpen, onExpand, onChange }) {
    this.container = container;
    this.onOpen = onOpen;
    this.onExpand = onExpand;
    this.onChange = onChange;
    this.cy = null;
    this.walks = 0;
    this.info = new Map(); // id → what the answers said of the node
    this.loading = null;
  }

  /** Load Cytoscape.js (its own file, fetched once signed in, so sign-in shows at once). */
  load() {
    this.loading ??= import("cytoscape").then(({ default: cytoscape }) => this.start(cytoscape));
    return this.loading;
  }

  start(cytoscape) {
    this.cy = cytoscape({
      container: this.container,
      style: STYLE,
      minZoom: 0.1,
      maxZoom: 4,
      boxSelectionEnabled: false,
      selectionType: "single",
      textureOnViewport: false,
      hideEdgesOnViewport: false,
      pixelRatio: "auto",
    });
    this.cy.on("tap", "node", (event) => {
      const node = event.target;
      if (node.hasClass("hub")) return;
      this.onOpen(node.id());
    });
    this.cy.on("dbltap", "node", (event) => {
      const node = event.target;
      if (!node.hasClass("hub")) this.onExpand(node.id());
    });
    this.container.addEventListener("keydown", (event) => this.key(event));
    // Cytoscape caches where its container sits on the page and refreshes that only on a
    // resize (after a 100 ms debounce), a scroll or a transition. When a flag row or a result
    // list moves the graph without resizing it, a click would land on the old spot and miss
    // the node. A pointerdown comes before the mousedown/touchstart Cytoscape reads, so
    // measuring again there makes every click hit what is drawn under it.
    this.container.addEventListener("pointerdown", () => this.cy.resize(), { capture: true });
    return this.cy;
  }

  key(event) {
    if (!this.cy) return;
    const step = 60;
    const pans = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] };
    const centre = { x: this.container.clientWidth / 2, y: this.container.clientHeight / 2 };
    if (pans[event.key]) this.cy.panBy({ x: pans[event.key][0], y: pans[event.key][1] });
    else if (event.key === "+" || event.key === "=") this.cy.zoom({ level: this.cy.zoom() * 1.25, renderedPosition: centre });
    else if (event.key === "-" || event.key === "_") this.cy.zoom({ level: this.cy.zoom() / 1.25, renderedPosition: centre });
    else if (event.key === "0") this.cy.fit(undefined, 24);
    else return;
    event.preventDefault();
  }

  /** Note what a search result or a read said about a memory (a drawn node shows it). */
  remember(id, facts) {
    this.info.set(id, { ...(this.info.get(id) || {}), ...facts });
    const node = this.cy && this.cy.getElementById(id);
    if (node && !node.empty() && !node.hasClass("hub")) {
      this.ensureNode(id, null, node.data("level"));
      this.onChange();
    }
  }

  ensureNode(id, facts, level) {
    if (facts) this.info.set(id, { ...(this.info.get(id) || {}), ...facts });
    const known = this.info.get(id) || {};
    const type = known.type || "memory";
    const [colour, shape] = typeStyle(type);
    let node = this.cy.getElementById(id);
    const label = known.name ? `${id} · ${known.name.replace(/^PEP \d+: /, "")}` : id;
    if (node.empty()) {
      node = this.cy.add({ group: "nodes", data: { id, label, colour, shape, type, level } });
    } else {
      node.data({ label, colour, shape, type });
      if (level < node.data("level")) node.data("level", level);
    }
    node.toggleClass("superseded", known.lifecycle === "superseded");
    return node;
  }

  ensureEdge(source, target, rel, distance, classes) {
    const id = `${source}|${rel}|${target}|${distance}`;
    if (!this.cy.getElementById(id).empty()) return;
    const label = rel ? (distance > 1 ? `${rel} · ${distance} hops` : rel) : "";
    this.cy.add({
      group: "edges",
      data: { id, source, target, rel, distance, colour: relColour(rel || "-"), label },
      classes,
    });
  }

  /** Draw one expand_neighbors answer; returns how many nodes it added. */
  async addWalk(answer) {
    await this.load();
    const before = this.cy.nodes().length;
    const had = new Set(this.cy.nodes().map((n) => n.id()));
    this.walks += 1;
    const origins = answer.origins;
    if (origins.length === 0) return 0;
    this.cy.batch(() => {
      const base = Math.min(...origins.map((id) => {
        const existing = this.cy.getElementById(id);
        return existing.empty() ? 0 : existing.data("level");
      }));
      for (const id of origins) this.ensureNode(id, null, base).addClass("origin");
      let anchor = origins[0];
      if (origins.length > 1) {
        anchor = `walk:${this.walks}`;
        this.cy.add({
          group: "nodes",
          data: { id: anchor, label: `walk ${this.walks}`, colour: "#9ca3af", shape: "diamond", type: "walk", level: base },
          classes: "hub",
        });
        for (const id of origins) this.ensureEdge(id, anchor, "", 0, "seedlink");
      }
      for (const n of answer.neighbors) {
        this.ensureNode(
          n.id,
          {
            type: n.type,
            name: n.name,
            lifecycle: n.lifecycle,
            project_id: n.project_id,
            parent_entity_id: n.parent_entity_id,
            passage_index: n.passage_index,
          },
          base + n.distance,
        );
        const reached = {
          relationship: n.relationship,
          direction: n.direction,
          distance: n.distance,
          score: n.score,
          from: anchor,
        };
        const facts = this.info.get(n.id);
        if (!facts.reached || n.distance < facts.reached.distance) facts.reached = reached;
        const [source, target] = n.direction === "outgoing" ? [anchor, n.id] : [n.id, anchor];
        this.ensureEdge(source, target, n.relationship, n.distance, n.distance > 1 ? "far" : "");
      }
    });
    if (before === 0) this.layout();
    else this.place(origins.length > 1 ? `walk:${this.walks}` : origins[0], had);
    this.onChange();
    return this.cy.nodes().length - before;
  }

  /**
   * Place a later walk's new nodes in rings around its anchor (a ring per hop), leaving every
   * node already drawn where it is, then bring the walk into view.
   */
  place(anchorId, had) {
    const anchor = this.cy.getElementById(anchorId);
    const fresh = this.cy.nodes().filter((n) => !had.has(n.id()));
    if (fresh.empty()) return;
    if (!had.has(anchorId)) {
      // a walk from seeds not yet drawn: beside the drawing
      const box = this.cy.nodes().filter((n) => had.has(n.id())).boundingBox();
      anchor.position({ x: box.x2 + 160, y: (box.y1 + box.y2) / 2 });
      const seeds = fresh.filter((n) => n.hasClass("origin") && n.id() !== anchorId);
      seeds.forEach((seed, i) => seed.position({ x: box.x2 + 100, y: (box.y1 + box.y2) / 2 + 40 * i }));
    }
    const centre = anchor.position();
    const rings = new Map();
    for (const node of fresh) {
      if (node.id() === anchorId || (node.hasClass("origin") && !had.has(anchorId))) continue;
      const hop = Math.max(1, node.data("level") - (anchor.data("level") ?? 0));
      if (!rings.has(hop)) rings.set(hop, []);
      rings.get(hop).push(node);
    }
    for (const [hop, nodes] of rings) {
      const radius = Math.max(90 * hop, (nodes.length * 34) / (2 * Math.PI));
      nodes.forEach((node, i) => {
        const angle = (2 * Math.PI * i) / nodes.length + hop * 0.4;
        node.position({ x: centre.x + radius * Math.cos(angle), y: centre.y + radius * Math.sin(angle) });
      });
    }
    this.cy.fit(anchor.closedNeighborhood().union(fresh), 30);
  }

  layout() {
    const levels = this.cy.nodes().map((n) => n.data("level"));
    const top = Math.max(0, ...levels);
    this.cy
      .layout({
        name: "concentric",
        concentric: (node) => top - node.data("level") + (node.hasClass("origin") ? 0.5 : 0),
        levelWidth: () => 1,
        minNodeSpacing: 18,
        avoidOverlap: true,
        animate: false,
        fit: true,
        padding: 24,
      })
      .run();
  }

  /** Lay every node out again in rings, a ring per hop from the first seed drawn. */
  arrange() {
    if (this.cy && !this.cy.nodes().empty()) this.layout();
  }

  fit() {
    if (this.cy) this.cy.fit(undefined, 24);
  }

  /** A written edge src -rel-> dst, drawn when both ends are on the graph. */
  addLink(src, rel, dst) {
    if (!this.cy || this.cy.getElementById(src).empty() || this.cy.getElementById(dst).empty()) return false;
    this.ensureEdge(src, dst, rel, 1, "written");
    this.onChange();
    return true;
  }

  removeNode(id) {
    if (!this.cy) return;
    this.cy.getElementById(id).remove();
    this.info.delete(id);
    this.onChange();
  }

  select(id) {
    if (!this.cy) return;
    this.cy.nodes(":selected").unselect();
    const node = this.cy.getElementById(id);
    if (!node.empty()) node.select();
  }

  clear() {
    this.walks = 0;
    if (this.cy) this.cy.elements().remove();
    this.onChange();
  }

  /** The nodes drawn (hubs left out), nearest first. */
  nodes() {
    if (!this.cy) return [];
    return this.cy
      .nodes()
      .filter((n) => !n.hasClass("hub"))
      .map((n) => ({ id: n.id(), level: n.data("level"), origin: n.hasClass("origin"), ...(this.info.get(n.id()) || {}) }))
      .sort((a, b) => a.level - b.level || a.id.localeCompare(b.id));
  }

  types() {
    return [...new Set(this.nodes().map((n) => n.type || "memory"))].sort();
  }

  relationships() {
    if (!this.cy) return [];
    return [...new Set(this.cy.edges().map((e) => e.data("rel")).filter(Boolean))].sort();
  }

  /** Where node `id` is drawn, in page (viewport) pixels; null when it is not drawn. */
  position(id) {
    const node = this.cy && this.cy.getElementById(id);
    if (!node || node.empty()) return null;
    const box = this.container.getBoundingClientRect();
    const at = node.renderedPosition();
    return { x: box.left + at.x, y: box.top + at.y };
  }
}
