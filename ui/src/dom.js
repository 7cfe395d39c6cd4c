// DOM helpers. Text from the service (names, bodies, ids) only ever becomes text nodes: the
// page never parses what a memory holds as HTML.

export function text(value) {
  return document.createTextNode(value == null ? "" : String(value));
}

/** An element with attributes (`on*` functions become listeners) and children. */
export function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? text(child) : child);
  }
  return node;
}

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

/** Comma- or space-separated names as a list (empty → undefined, so the field is left out). */
export function names(value) {
  const list = String(value || "")
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
  return list.length ? list : undefined;
}

/** Copy `value` to the clipboard; false when the browser refused. */
export async function copy(value) {
  try {
    await navigator.clipboard.writeText(value);
    return true;
  } catch {
    const area = el("textarea", { readonly: true, "aria-hidden": "true", class: "offscreen" });
    area.value = value;
    document.body.append(area);
    area.select();
    let done = false;
    try {
      done = document.execCommand("copy");
    } catch {
      done = false;
    }
    area.remove();
    return done;
  }
}
