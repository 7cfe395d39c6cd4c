"""``make bench-ui``: how fast the memory explorer (``/ui``) answers a person, measured in
headless Debian chromium (Playwright) against a running ``sibyl-pg serve`` (``make run``) on
loopback. The figures go in ``docs/ui.md``; the tests never assert a time.

What is measured (medians and worst of ``--runs`` fresh tabs, in milliseconds):

- **first view**: from navigation start to the sign-in form being interactive (the page's
  script has run: ``performance.mark("explorer-ready")``); and, for a tab already signed in, to
  the search box being usable (``explorer-app``, after the key's capabilities were asked) and to
  the graph library being loaded (``explorer-graph``);
- **a 200-node neighbourhood**: walks (depth 2, limit 24) from pep_0484, then from the nodes
  drawn, breadth first, until at least ``--nodes`` nodes are drawn (each walk's time from the
  click to its answer drawn); the force-directed "Arrange" of the whole graph; then, on it: a
  mouse-drag pan and a wheel zoom (the longest gap between two painted frames while they run,
  and the frames painted), and a click on a node, clocked in the page from pointer down to the
  node drawn selected, and to its slice shown in the Read pane (which includes the REST call).

Usage: ``python -m bench.ui [--url http://127.0.0.1:8000] [--keys .data/demo-keys.env]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from app.core.settings import PROJECT_ROOT

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (``make browser`` installs it); no browser is ever downloaded."""

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Flags of every headless chromium this project starts (Playwright adds ``--headless`` and a
fresh ``--user-data-dir``): no sandbox as root, no GPU, and none of the browser's own
connections (updates, sync, field trials), which a closed network refuses."""

FRAME_RECORDER = """() => {
  window.__frames = [];
  const tick = (t) => {
    window.__frames.push(t);
    if (window.__recording) requestAnimationFrame(tick);
  };
  window.__recording = true;
  requestAnimationFrame(tick);
}"""
FRAME_STOP = """() => {
  window.__recording = false;
  const f = window.__frames;
  const gaps = f.slice(1).map((t, i) => t - f[i]);
  return { frames: f.length, longest_gap_ms: gaps.length ? Math.max(...gaps) : null };
}"""


CLICK_CLOCK = """() => {
  const clock = window.__clicked = {};
  const graph = document.querySelector('#graph');
  const down = () => { clock.down = performance.now(); };
  graph.addEventListener('pointerdown', down, { capture: true, once: true });
  window.sibylExplorer.graph().once('select', 'node', () => {
    requestAnimationFrame(() => { clock.selected = performance.now(); });  // painted
  });
  const status = document.querySelector('#status');
  new MutationObserver((_, observer) => {
    if (status.textContent.startsWith('Read ')) {
      requestAnimationFrame(() => { clock.read = performance.now(); });
      observer.disconnect();
    }
  }).observe(status, { childList: true, characterData: true, subtree: true });
}"""
"""In-page clocks of a click on a node: pointer down, the node drawn selected (the next frame
after the graph selects it), the slice shown in the Read pane (the frame after it is)."""


def read_keys(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of a demo keys file (``make run`` writes it)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {name.strip(): value.strip() for name, value in pairs if not name.startswith("#")}


def summary(values: list[float]) -> dict[str, float]:
    """Median and worst of ``values``, rounded to 0.1 ms."""
    return {"median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def mark(page: Any, name: str) -> float:
    """Milliseconds from navigation start to the page's performance mark ``name``."""
    at: float = page.evaluate("(n) => performance.getEntriesByName(n)[0]?.startTime ?? null", name)
    return at


def first_views(browser: Any, url: str, key: str, runs: int) -> dict[str, Any]:
    """The first view, signed out and signed in, over ``runs`` fresh tabs each."""
    signin: list[float] = []
    app: list[float] = []
    graph: list[float] = []
    for _ in range(runs):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{url}/ui")
        page.wait_for_selector("html[data-ready]")
        signin.append(mark(page, "explorer-ready"))
        context.close()
    for _ in range(runs):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        # a tab already signed in: the key is in its sessionStorage before the page runs
        context.add_init_script(f"sessionStorage.setItem('sibyl-pg.api-key', {json.dumps(key)})")
        page = context.new_page()
        page.goto(f"{url}/ui")
        page.wait_for_selector("html[data-graph=ready]")
        app.append(mark(page, "explorer-app"))
        graph.append(mark(page, "explorer-graph"))
        context.close()
    return {
        "signin_interactive_ms": summary(signin),
        "signed_in_search_ready_ms": summary(app),
        "signed_in_graph_loaded_ms": summary(graph),
    }


def big_neighbourhood(
    browser: Any, url: str, key: str, nodes: int, screenshot: Path | None = None
) -> dict[str, Any]:
    """Grow a neighbourhood of ``nodes`` nodes by walks, then pan, zoom and click on it."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_init_script(f"sessionStorage.setItem('sibyl-pg.api-key', {json.dumps(key)})")
    page = context.new_page()
    page.goto(f"{url}/ui")
    page.wait_for_selector("html[data-graph=ready]")
    walks: list[float] = []
    expanded: set[str] = set()
    seed = "pep_0484"
    page.select_option("#expand-form select[name=depth]", "2")
    while True:
        before = page.inner_text("#rounds")
        page.fill("#expand-seeds", seed)
        started = time.perf_counter()
        page.click("#expand-submit")
        page.wait_for_function(
            "(b) => document.querySelector('#rounds').textContent !== b", arg=before
        )
        walks.append((time.perf_counter() - started) * 1000)
        expanded.add(seed)
        drawn: list[str] = page.evaluate("() => window.sibylExplorer.nodes()")
        if len(drawn) >= nodes:
            break
        fresh = [n for n in drawn if n not in expanded]
        if not fresh or len(walks) > 60:
            break
        seed = fresh[0]  # breadth first: the nearest node not walked from yet
    count = len(drawn)
    page.eval_on_selector("#graph-arrange", "b => { window.__t = performance.now(); b.click(); }")
    arrange_ms: float = page.evaluate("() => performance.now() - window.__t")
    if screenshot:
        page.screenshot(path=str(screenshot))
    edges: int = page.evaluate("() => window.sibylExplorer.graph().edges().length")
    box = page.locator("#graph").bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

    # pan: drag an empty corner of the canvas across it
    page.evaluate(FRAME_RECORDER)
    started = time.perf_counter()
    page.mouse.move(box["x"] + 12, box["y"] + 12)
    page.mouse.down()
    for step in range(1, 31):
        page.mouse.move(box["x"] + 12 + step * 8, box["y"] + 12 + step * 5)
    page.mouse.up()
    pan_ms = (time.perf_counter() - started) * 1000
    page.wait_for_timeout(100)
    pan = page.evaluate(FRAME_STOP)

    # zoom: twenty wheel steps in, then out
    page.evaluate(FRAME_RECORDER)
    page.mouse.move(cx, cy)
    started = time.perf_counter()
    for delta in [-120] * 10 + [120] * 10:
        page.mouse.wheel(0, delta)
    zoom_ms = (time.perf_counter() - started) * 1000
    page.wait_for_timeout(100)
    zoom = page.evaluate(FRAME_STOP)
    page.evaluate("() => window.sibylExplorer.graph().fit(undefined, 24)")

    # click: a node near the middle of the drawing
    target: str = page.evaluate(
        """() => { const cy = window.sibylExplorer.graph();
        const n = cy.nodes().filter(n => !n.hasClass('hub') && !n.hasClass('origin'));
        return n[Math.floor(n.length / 2)].id(); }"""
    )
    at = page.evaluate("(id) => window.sibylExplorer.position(id)", target)
    page.evaluate(CLICK_CLOCK)
    page.mouse.click(at["x"], at["y"])
    page.wait_for_function("() => window.__clicked.read !== undefined")
    clicked = page.evaluate("() => window.__clicked")
    context.close()
    return {
        "nodes": count,
        "edges": edges,
        "walks": len(walks),
        "walk_drawn_ms": summary(walks),
        "arrange_ms": round(arrange_ms, 1),
        "pan": {"input_ms": round(pan_ms, 1), **pan},
        "zoom": {"input_ms": round(zoom_ms, 1), **zoom},
        "click_to_selected_ms": round(clicked["selected"] - clicked["down"], 1),
        "click_to_slice_shown_ms": round(clicked["read"] - clicked["down"], 1),
    }


def tour(browser: Any, url: str, key: str, path: Path) -> None:
    """The README's screenshot: search "type hints", walk from the first result, read it."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_init_script(f"sessionStorage.setItem('sibyl-pg.api-key', {json.dumps(key)})")
    page = context.new_page()
    page.goto(f"{url}/ui")
    page.wait_for_selector("html[data-graph=ready]")
    page.fill("#search-query", "type hints")
    page.press("#search-query", "Enter")
    page.wait_for_selector("#results > li")
    page.locator("#results > li").first.get_by_role("button", name="Expand", exact=True).click()
    page.wait_for_function(
        "() => document.querySelector('#rounds').textContent.startsWith('Rounds: 1 ')"
    )
    at = page.evaluate("() => window.sibylExplorer.position('pep_0484')")
    page.mouse.click(at["x"], at["y"])
    page.wait_for_selector("#slice-title")
    page.mouse.move(0, 0)
    page.screenshot(path=str(path))
    context.close()


def main(argv: list[str] | None = None) -> int:
    """Run the measurements; print them as JSON (and write them to ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.ui", description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--keys", type=Path, default=PROJECT_ROOT / ".data" / "demo-keys.env")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--screenshot", type=Path, default=None, help="PNG of the big graph")
    parser.add_argument(
        "--tour", type=Path, default=None, help="only save the README's screenshot here"
    )
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"no chromium at {CHROMIUM}: make browser", file=sys.stderr)
        return 2
    key = read_keys(args.keys)["TYPING_READER_KEY"]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True
        )
        try:
            if args.tour:
                tour(browser, args.url, key, args.tour)
                return 0
            report = {
                "url": args.url,
                "runs": args.runs,
                **(first_views(browser, args.url, key, args.runs) if args.runs else {}),
                "neighbourhood": big_neighbourhood(
                    browser, args.url, key, args.nodes, args.screenshot
                ),
            }
        finally:
            browser.close()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
