// The Read pane: fetch_slice of a memory or passage, with its breadcrumbs, the window, the
// previous/next spans and covers_parent; parent_id copied with one click.

import { api } from "./api.js";
import { $, copy, el, text } from "./dom.js";

export const DEFAULT_WINDOW = 3;
const LEARN_WINDOW = 64; // the verb's largest window: ids of the spans around, without text

export class Reader {
  constructor(target, { onOpened, onExpand, say }) {
    this.target = target;
    this.onOpened = onOpened;
    this.onExpand = onExpand;
    this.say = say;
    this.answer = null;
    this.ticket = 0;
    this.window = DEFAULT_WINDOW;
    this.spanIds = new Map(); // parent id → Map(passage index → passage id)
    this.lastRequest = null;
  }

  learn(answer) {
    if (!answer.sliced) return;
    let ids = this.spanIds.get(answer.parent_id);
    if (!ids) this.spanIds.set(answer.parent_id, (ids = new Map()));
    for (const p of answer.passages) if (p.passage_index !== null) ids.set(p.passage_index, p.id);
  }

  async slice(body) {
    this.lastRequest = body;
    const { data } = await api.slice(body);
    this.learn(data);
    return data;
  }

  /** Open a memory or a passage (its window is centred on it). */
  async open(entityId) {
    const ticket = ++this.ticket; // a later open or page wins: a slow answer is dropped
    this.say(`Reading ${entityId}…`);
    try {
      const answer = await this.slice({ entity_id: entityId, window: this.window });
      if (ticket !== this.ticket) return;
      this.show(answer);
      this.say(`Read ${answer.parent_id}: ${answer.total} span(s)`);
      this.onOpened(answer);
    } catch (error) {
      if (ticket !== this.ticket) return;
      this.answer = null;
      this.showError(error);
      this.say("Nothing to read");
      this.onOpened(null);
    }
  }

  /** Move the window so that it starts `delta` spans later (negative: earlier). */
  async page(delta) {
    const a = this.answer;
    if (!a || !a.sliced) return;
    const w = a.window;
    const last = Math.max((a.passage_total ?? 0) - w, 0);
    const start = Math.min(Math.max(a.window_start + delta, 0), last);
    if (start === a.window_start) return;
    // the verb centres a window on the span it is given: start = p − (window − 1) // 2
    const centre = start + Math.floor((w - 1) / 2);
    const ids = this.spanIds.get(a.parent_id);
    const ticket = ++this.ticket;
    try {
      if (!ids.has(centre)) {
        const near = [...ids.keys()].sort((x, y) => Math.abs(x - centre) - Math.abs(y - centre))[0];
        await this.slice({ entity_id: ids.get(near), window: LEARN_WINDOW, content_max_chars: 0 });
      }
      const id = ids.get(centre);
      if (!id) throw new Error("span not found");
      const answer = await this.slice({ entity_id: id, window: w });
      if (ticket !== this.ticket) return;
      this.show(answer);
      this.say(`Spans ${answer.window_start + 1}–${answer.window_start + answer.passages.length} of ${answer.passage_total}`);
      this.onOpened(answer);
    } catch (error) {
      this.showError(error);
    }
  }

  showError(error) {
    const message = error.status === 404 ? "Entity not found" : error.detail || String(error);
    this.target.replaceChildren(
      el("div", { class: "notice", role: "alert" }, [
        el("strong", {}, [text(message)]),
        error.status === 404
          ? el("p", {}, [text("No memory with this id is readable with this key: absent and not readable look the same.")])
          : null,
      ]),
    );
  }

  show(answer) {
    // a control of the pane that had focus gets it back once the pane is drawn again
    const focused = this.target.contains(document.activeElement) ? document.activeElement.id : null;
    this.answer = answer;
    const first = answer.window_start ?? 0;
    const shown = answer.passages.length;
    const where = answer.sliced
      ? `Spans ${first + 1}–${first + shown} of ${answer.passage_total}`
      : "Not cut into spans: the whole body";
    const covers = answer.covers_parent
      ? "covers the whole memory: yes"
      : "covers the whole memory: no";
    const atStart = !answer.sliced || first === 0;
    const atEnd = !answer.sliced || first + answer.window >= answer.passage_total;

    const copyButton = el("button", { type: "button", class: "quiet", id: "copy-parent" }, [text("Copy parent_id")]);
    copyButton.addEventListener("click", async () => {
      const done = await copy(answer.parent_id);
      this.say(done ? `Copied ${answer.parent_id}` : `Select and copy: ${answer.parent_id}`);
      copyButton.textContent = done ? "Copied" : "Copy parent_id";
      setTimeout(() => (copyButton.textContent = "Copy parent_id"), 1500);
    });

    const prev = el("button", { type: "button", id: "span-prev", disabled: atStart }, [text("← Previous span")]);
    const next = el("button", { type: "button", id: "span-next", disabled: atEnd }, [text("Next span →")]);
    prev.addEventListener("click", () => this.page(-1));
    next.addEventListener("click", () => this.page(1));
    const expand = el("button", { type: "button", class: "quiet", id: "read-expand" }, [text("Expand from here")]);
    expand.addEventListener("click", () => this.onExpand(answer.parent_id));
    const windowSelect = el(
      "select",
      { id: "read-window", "aria-label": "Spans per window" },
      [1, 3, 5, 9].map((n) => el("option", { value: n, selected: n === answer.window }, [text(`${n} span${n > 1 ? "s" : ""}`)])),
    );
    windowSelect.addEventListener("change", async () => {
      this.window = Number(windowSelect.value);
      const centre = answer.passages[0]?.id ?? answer.parent_id;
      try {
        const again = await this.slice({ entity_id: centre, window: this.window });
        this.show(again);
        this.onOpened(again);
      } catch (error) {
        this.showError(error);
      }
    });

    const spans = answer.passages.map((p) => {
      const crumbs = (p.breadcrumb || "").split(" > ").filter(Boolean);
      const index = p.passage_index === null ? null : p.passage_index + 1;
      return el("section", { class: "span", "aria-label": index ? `Span ${index}` : "Body" }, [
        crumbs.length
          ? el("nav", { "aria-label": "Breadcrumb", class: "crumbs" }, [el("ol", {}, crumbs.map((c) => el("li", {}, [text(c)])))])
          : null,
        el("p", { class: "span-meta" }, [
          text(index ? `Span ${index} of ${p.passage_total}` : "Body"),
          text(" · "),
          el("code", {}, [text(p.id)]),
        ]),
        el("pre", { class: "span-body", tabindex: "0" }, [text(p.content)]),
        p.truncated ? el("p", { class: "notice" }, [text("Cut at the window's character budget.")]) : null,
      ]);
    });

    this.target.replaceChildren(
      el("article", { class: "slice", "aria-labelledby": "slice-title" }, [
        el("header", {}, [
          el("h3", { id: "slice-title" }, [text(answer.parent_name)]),
          el("p", { class: "meta" }, [
            el("span", { class: "badge type" }, [text(answer.parent_type)]),
            answer.project_id ? el("span", { class: "badge" }, [text(answer.project_id)]) : null,
            text(" parent_id "),
            el("code", { id: "parent-id" }, [text(answer.parent_id)]),
            text(" "),
            copyButton,
          ]),
          el("p", { class: "window", id: "slice-window" }, [
            text(`${where} · window ${answer.window} · `),
            el("span", { class: answer.covers_parent ? "badge yes" : "badge no", id: "covers-parent" }, [text(covers)]),
          ]),
          el("div", { class: "row nav" }, [prev, next, windowSelect, expand]),
        ]),
        ...spans,
      ]),
    );
    const again = focused && $(`#${focused}`, this.target);
    if (again && !again.disabled) again.focus();
    else if (focused) (next.disabled ? prev : next).focus();
  }

  clear(message) {
    this.answer = null;
    this.target.replaceChildren(el("p", { class: "help" }, [text(message)]));
  }
}
