"""The memory explorer at ``/ui``, end to end in a real headless browser: Debian's ``chromium``,
driven by Playwright for Python, against a real ``sibyl-pg serve`` over the PEP corpus (the
session's ``served`` fixture).

Every test opens its tabs through :func:`open_tab`, which
- gives each tab a fresh browser context (its own ``sessionStorage``) at 1280×800 unless told;
- lets a request through only when it goes to the server: any other host is recorded, never
  sent, and fails the test;
- fails the test on an error thrown in the page or a Content-Security-Policy violation;
- saves a screenshot of each tab at the end, pass or fail, in ``test-artifacts/`` (CI keeps it).

One browser for the module; the server is the session's. Times are never asserted here (this
machine is shared and noisy): ``make bench-ui`` measures them (docs/ui.md).

Chromium comes from Debian's package (``make browser``, which ``.ci/run`` calls); Playwright
never downloads a browser. Without ``/usr/bin/chromium`` these tests skip, except under CI
(``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.core.settings import PROJECT_ROOT
from bench.ui import CHROMIUM, CHROMIUM_FLAGS

pytestmark = pytest.mark.corpus

ARTIFACTS = PROJECT_ROOT / "test-artifacts"
WRITER = "user_jelle_zijlstra"  # the demo writer of `make run`: a typing PEP author
EXPLORER_PROJECT = "proj_explorer_test"


@pytest.fixture(scope="module")
def browser(served: str, keys: dict[str, str]) -> Iterator[Any]:
    # The async fixtures (the server, the keys) are set up first: Playwright's synchronous API
    # runs an event loop of its own in this thread while the browser is open.
    if not Path(CHROMIUM).exists():
        message = f"Debian's chromium is not installed at {CHROMIUM} (make browser)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Playwright gives every launch a fresh, empty profile (--user-data-dir) of its own
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
async def keys(engine, pep_corpus: dict[str, str]) -> dict[str, str]:
    """A key per role of the tests: the demo readers' read keys, the demo writer's read,write
    key (a contributor of a project of its own, so its edits touch no memory other tests read)
    and an org admin's read,admin key."""
    from tests.builders import import_dicts, make_key

    await import_dicts(
        engine,
        [
            {
                "kind": "project",
                "id": EXPLORER_PROJECT,
                "org": "org_python",
                "name": "Explorer tests",
                "visibility": "private",
            },
            {"kind": "member", "project": EXPLORER_PROJECT, "user": WRITER, "role": "contributor"},
        ],
    )
    return {
        "reader": pep_corpus["user_typing_reader"],
        "outsider": pep_corpus["user_outsider"],
        "writer": await make_key(engine, WRITER, scopes=("read", "write")),
        "admin": await make_key(engine, "user_org_admin", scopes=("read", "admin")),
    }


@dataclass
class Tab:
    """One browser tab and what the guard saw in it."""

    page: Any
    context: Any
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def open_tab(browser, served: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    server = urlsplit(served)
    tabs: list[Tab] = []

    def make(width: int = 1280, height: int = 800) -> Any:
        context = browser.new_context(
            viewport={"width": width, "height": height},
            base_url=served,
            permissions=["clipboard-read", "clipboard-write"],
        )
        page = context.new_page()
        tab = Tab(page, context)

        def guard(route: Any) -> None:
            url = urlsplit(route.request.url)
            if (url.scheme, url.netloc) == (server.scheme, server.netloc):
                route.continue_()
            else:
                tab.foreign.append(route.request.url)
                route.abort()

        context.route("**/*", guard)
        page.on("pageerror", lambda error: tab.errors.append(f"page error: {error}"))
        page.on(
            "console",
            lambda message: (
                tab.errors.append(f"console: {message.text}")
                if "Content Security Policy" in message.text
                else None
            ),
        )
        tabs.append(tab)
        return page

    yield make
    ARTIFACTS.mkdir(exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    for n, tab in enumerate(tabs):
        suffix = f"-{n + 1}" if len(tabs) > 1 else ""
        try:
            tab.page.screenshot(path=str(ARTIFACTS / f"{name}{suffix}.png"), full_page=False)
        finally:
            tab.context.close()
    foreign = [url for tab in tabs for url in tab.foreign]
    errors = [error for tab in tabs for error in tab.errors]
    assert not foreign, f"the page requested hosts other than the server: {foreign}"
    assert not errors, errors


# --- what a user does ----------------------------------------------------------------------


def sign_in(page: Any, key: str) -> None:
    """Open /ui and sign in with ``key`` by keyboard (the key field has focus)."""
    page.goto("/ui")
    page.wait_for_selector("html[data-ready]")
    assert page.evaluate("() => document.activeElement.id") == "signin-key"
    page.keyboard.type(key)
    page.keyboard.press("Enter")
    page.wait_for_selector("html[data-view=app]")
    assert key not in page.url


def search(page: Any, query: str) -> list[str]:
    """Search from the box; the ids of the results, in order."""
    page.eval_on_selector("#status", "e => { e.textContent = '' }")
    page.fill("#search-query", query)
    page.press("#search-query", "Enter")
    page.wait_for_function(
        "(q) => document.querySelector('#status').textContent.endsWith(`result(s) for “${q}”`)",
        arg=query,
    )
    ids: list[str] = page.eval_on_selector_all("#results > li", "els => els.map(e => e.dataset.id)")
    return ids


def drawn(page: Any) -> list[str]:
    ids: list[str] = page.evaluate("() => window.sibylExplorer.nodes()")
    return ids


def rounds(page: Any) -> str:
    text: str = page.inner_text("#rounds")
    return text


def wait_rounds(page: Any, n: int) -> None:
    page.wait_for_function(
        "(n) => document.querySelector('#rounds').textContent.startsWith(`Rounds: ${n} `)", arg=n
    )


def click_node(page: Any, node_id: str, *, double: bool = False) -> None:
    """Click (or double-click) node ``node_id`` where the graph draws it."""
    at = page.evaluate("(id) => window.sibylExplorer.position(id)", node_id)
    assert at is not None, f"{node_id} is not drawn"
    box = page.locator("#graph").bounding_box()
    assert box["x"] <= at["x"] <= box["x"] + box["width"], f"{node_id} is drawn off the graph"
    assert box["y"] <= at["y"] <= box["y"] + box["height"], f"{node_id} is drawn off the graph"
    if double:
        page.mouse.dblclick(at["x"], at["y"])
    else:
        page.mouse.click(at["x"], at["y"])


def open_id(page: Any, entity_id: str) -> str:
    """Open ``entity_id`` from the Read pane's box; the pane's text once it answered."""
    page.click("#tab-read")
    page.eval_on_selector("#status", "e => { e.textContent = '' }")
    page.fill("#open-id", entity_id)
    page.press("#open-id", "Enter")
    page.wait_for_function(
        "() => /^(Read |Nothing to read)/.test(document.querySelector('#status').textContent)"
    )
    text: str = page.inner_text("#read")
    return text


def walk_from(page: Any, seeds: str) -> None:
    before = int(rounds(page).split()[1])
    page.fill("#expand-seeds", seeds)
    page.click("#expand-submit")
    wait_rounds(page, before + 1)


# --- the tests -----------------------------------------------------------------------------


def test_a_reader_searches_walks_and_reads(open_tab, keys):
    page = open_tab()
    sign_in(page, keys["reader"])
    assert page.is_hidden("#tab-curate") and page.is_hidden("#tab-plan")  # a read key
    assert page.evaluate("() => document.activeElement.id") == "search-query"
    page.keyboard.type("type hints")
    page.keyboard.press("Enter")
    page.wait_for_selector("#results > li")
    ids = page.eval_on_selector_all("#results > li", "els => els.map(e => e.dataset.id)")
    assert ids[0] == "pep_0484"
    first = page.locator("#results > li").first
    assert "PEP 484: Type Hints" in first.inner_text()
    assert {"decision", "active", "memory"} <= set(first.locator(".badge").all_inner_texts())
    assert page.locator("#results .badge.passage").count() > 0  # passages say whose they are
    assert "candidates" in page.inner_text("#search-filters")

    first.get_by_role("button", name="Expand", exact=True).click()
    wait_rounds(page, 1)
    page.wait_for_function("() => window.sibylExplorer.nodes().length >= 10")
    nodes = drawn(page)
    assert len(nodes) >= 10 and "pep_0484" in nodes
    assert rounds(page) == "Rounds: 1 of 3"
    assert "truncated" in page.inner_text("#walk-flags")
    assert "frontier" in page.inner_text("#walk-flags")
    listed = page.eval_on_selector_all("#node-list tbody tr", "rows => rows.map(r => r.dataset.id)")
    assert sorted(listed) == sorted(nodes)  # the keyboard's way to every drawn node

    click_node(page, "pep_0484")
    page.wait_for_selector("#slice-title")
    assert page.inner_text("#slice-title") == "PEP 484: Type Hints"
    assert page.inner_text("#parent-id") == "pep_0484"
    page.click("#copy-parent")  # cite parent_id with one click
    assert page.evaluate("() => navigator.clipboard.readText()") == "pep_0484"
    window = page.inner_text("#slice-window")
    assert re.match(r"Spans 1–3 of (\d+) ", window) and int(window.split()[3]) > 3, window
    spans = page.eval_on_selector_all(".span .span-meta code", "els => els.map(e => e.textContent)")
    page.click("#span-next")
    page.wait_for_function(
        "() => document.querySelector('#slice-window').textContent.startsWith('Spans 2–4')"
    )
    after = page.eval_on_selector_all(".span .span-meta code", "els => els.map(e => e.textContent)")
    assert after[:2] == spans[1:] and after[2] not in spans
    assert page.evaluate("() => document.activeElement.id") == "span-next"  # focus stays
    assert page.locator(".span .crumbs li").count() > 0  # breadcrumbs
    assert "covers the whole memory: no" in page.inner_text("#covers-parent")

    neighbour = next(n for n in nodes if n != "pep_0484")
    click_node(page, neighbour, double=True)  # expand from a node: a second round
    wait_rounds(page, 2)
    assert rounds(page) == "Rounds: 2 of 3"

    # keyboard: the tabs move with the arrow keys, and focus is visible
    page.focus("#tab-read")
    page.keyboard.press("Tab")
    outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"


def test_a_slow_answer_never_replaces_the_newer_one(open_tab, keys):
    """The first search and the first read are held by the network until the second of each
    has answered: the page keeps showing the second (the query typed last, the memory opened
    last), and the filters summary names the lanes that ran."""
    page = open_tab()
    sign_in(page, keys["reader"])
    held: list[Any] = []

    def hold_first(route: Any) -> None:
        if not held:
            held.append(route)  # answered below, after the newer request
        else:
            route.continue_()

    page.route("**/api/search", hold_first)
    page.fill("#search-query", "enum")
    page.press("#search-query", "Enter")
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.startsWith('Searching')"
    )
    newer = search(page, "walrus operator")
    held[0].continue_()
    page.wait_for_timeout(1500)  # the held answer arrives and must be dropped
    assert page.eval_on_selector_all("#results > li", "els => els.map(e => e.dataset.id)") == newer
    assert page.inner_text("#status").endswith("result(s) for “walrus operator”")
    assert "[object Object]" not in page.inner_text("#search-filters")
    assert "lanes: fulltext" in page.inner_text("#search-filters")
    page.unroute("**/api/search")

    held.clear()
    page.route("**/api/search/slice", hold_first)
    page.click("#tab-read")
    page.fill("#open-id", "pep_0484")
    page.press("#open-id", "Enter")
    for _ in range(50):  # the first read reaches the network (and is held there)
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the first read was not sent"
    assert "PEP 572" in open_id(page, "pep_0572")
    held[0].continue_()
    page.wait_for_timeout(1500)
    assert "PEP 572" in page.inner_text("#read")
    assert "PEP 484" not in page.inner_text("#read")
    page.unroute("**/api/search/slice")


def test_past_the_budget_the_counter_warns_and_nothing_locks(open_tab, keys):
    page = open_tab()
    sign_in(page, keys["reader"])
    walk_from(page, "pep_0008")
    page.click("#graph-clear")  # a new graph: the count starts again
    assert rounds(page) == "Rounds: 0 of 3" and drawn(page) == []
    for n, seed in enumerate(["pep_0484", "pep_0526", "pep_0544", "pep_0612"], start=1):
        walk_from(page, seed)
        assert rounds(page).startswith(f"Rounds: {n} of 3")
    assert "past the agents' budget" in rounds(page)
    assert page.locator("#rounds.over").count() == 1
    assert len(drawn(page)) > 30  # the fourth walk was drawn too


def test_a_node_opens_when_the_page_moved_the_graph_just_before_the_click(open_tab, keys):
    """The graph is drawn, the pointer has been over it, then something above it (a flag row, a
    longer result list, a scrollbar) moves it down without resizing it, and the user clicks a
    node at once: the click opens that node, not whatever was there before the move."""
    page = open_tab()
    sign_in(page, keys["reader"])
    walk_from(page, "pep_0484")
    box = page.locator("#graph").bounding_box()
    page.mouse.move(box["x"] + 5, box["y"] + 5)  # the graph notes where it sits
    page.evaluate(
        """() => {
          const spacer = document.createElement('div');
          spacer.style.height = '180px';
          document.querySelector('#graph').before(spacer);
        }"""
    )
    assert page.locator("#graph").bounding_box()["y"] == pytest.approx(box["y"] + 180, abs=1)
    click_node(page, "pep_0484")
    page.wait_for_function(
        "() => document.querySelector('#slice-title')?.textContent === 'PEP 484: Type Hints'"
    )


def test_the_outsider_sees_hidden_memories_exactly_as_missing_ones(open_tab, keys):
    reader = open_tab()
    sign_in(reader, keys["reader"])
    assert "PEP 484: Type Hints" in open_id(reader, "pep_0484")  # the pair: it exists

    outsider = open_tab()
    sign_in(outsider, keys["outsider"])
    hidden = open_id(outsider, "pep_0484")
    hidden_status = outsider.inner_text("#status")
    missing = open_id(outsider, "pep_9999")
    assert hidden == missing and "Entity not found" in hidden
    assert outsider.inner_text("#status") == hidden_status

    walk_from(outsider, "pep_0484")
    hidden_walk = outsider.inner_text("#walk-flags").replace("pep_0484", "ID")
    walk_from(outsider, "pep_9999")
    missing_walk = outsider.inner_text("#walk-flags").replace("pep_9999", "ID")
    assert hidden_walk == missing_walk and "unresolved: ID" in hidden_walk
    assert drawn(outsider) == []

    assert "pep_0484" not in search(outsider, "type hints")


def test_a_writer_edits_and_a_stale_revision_is_a_conflict(open_tab, keys, served):
    api = f"{served}/api"
    auth = {"Authorization": f"Bearer {keys['writer']}"}
    note, other = (f"ui_note_{secrets.token_hex(4)}" for _ in range(2))
    for entity_id, name in ((note, "Explorer note"), (other, "Explorer other note")):
        made = httpx.post(
            f"{api}/entities",
            headers=auth,
            json={
                "id": entity_id,
                "type": "note",
                "name": name,
                "content": "A note the explorer's test edits.",
                "project": EXPLORER_PROJECT,
            },
        )
        assert made.status_code == 201, made.text
    try:
        mine = open_tab()
        sign_in(mine, keys["writer"])
        assert mine.is_visible("#tab-curate") and mine.is_hidden("#tab-plan")
        open_id(mine, note)
        mine.click("#tab-curate")
        mine.wait_for_selector("#edit-form:not([hidden])")
        assert mine.inner_text("#edit-revision") == "revision 1"

        theirs = open_tab()
        sign_in(theirs, keys["writer"])
        open_id(theirs, note)
        theirs.click("#tab-curate")
        theirs.wait_for_selector("#edit-form:not([hidden])")
        theirs.fill("#edit-name", "Renamed in the other tab")
        theirs.click("#edit-save")
        theirs.wait_for_selector("#edit-message.ok")
        assert theirs.inner_text("#edit-message") == "Saved: revision 2."

        mine.fill("#edit-name", "Renamed here")
        mine.select_option("#edit-lifecycle", "superseded")
        mine.click("#edit-save")
        mine.wait_for_selector("#edit-message.conflict")
        assert mine.inner_text("#edit-message").startswith("Changed by someone else: reload")
        stored = httpx.get(f"{api}/entities/{note}", headers=auth).json()
        assert (stored["name"], stored["lifecycle"], stored["revision"]) == (
            "Renamed in the other tab",
            "active",
            2,
        )
        mine.click("#edit-reload")
        mine.wait_for_function(
            "() => document.querySelector('#edit-revision').textContent === 'revision 2'"
        )
        assert mine.input_value("#edit-name") == "Renamed in the other tab"
        mine.fill("#edit-content", "A note the explorer's test edited.")
        mine.click("#edit-save")
        mine.wait_for_selector("#edit-message.ok")
        assert mine.inner_text("#edit-message") == "Saved: revision 3."

        # link two memories
        assert mine.input_value("#link-src") == note
        mine.fill("#link-rel", "REFERENCES")
        mine.fill("#link-dst", other)
        mine.click("#link-form button[type=submit]")
        mine.wait_for_selector("#link-message.ok")
        assert mine.inner_text("#link-message").startswith(f"Linked: {note} -REFERENCES-> {other}")
        walked = httpx.post(
            f"{api}/search/expand",
            headers=auth,
            json={"entity_ids": [note], "relationship_types": ["REFERENCES"]},
        ).json()
        assert [(n["id"], n["direction"]) for n in walked["neighbors"]] == [(other, "outgoing")]

        # delete, with a confirmation: cancel keeps it
        mine.click("#edit-delete")
        assert mine.is_visible("#delete-dialog") and note in mine.inner_text("#delete-text")
        mine.click("#delete-cancel")
        assert httpx.get(f"{api}/entities/{note}", headers=auth).status_code == 200
        mine.click("#edit-delete")
        mine.click("#delete-confirm")
        mine.wait_for_function(
            "(id) => document.querySelector('#status').textContent === `Deleted ${id}`", arg=note
        )
        assert httpx.get(f"{api}/entities/{note}", headers=auth).status_code == 404
    finally:
        for entity_id in (note, other):
            httpx.delete(f"{api}/entities/{entity_id}", headers=auth)


def test_an_admin_sees_the_walk_plan_with_its_buffers(open_tab, keys):
    page = open_tab()
    sign_in(page, keys["admin"])
    assert page.is_visible("#tab-plan") and page.is_hidden("#tab-curate")
    walk_from(page, "pep_0484")
    page.click("#tab-plan")
    page.wait_for_selector(".plan-table")
    names = page.eval_on_selector_all(".statement h3", "els => els.map(e => e.textContent)")
    assert names == ["1. sibyl:expand_neighbors.seeds", "2. sibyl:expand_neighbors"]
    walk = page.locator(".statement").nth(1)
    headers = walk.locator(".plan-table thead th").all_inner_texts()
    assert headers == ["Node", "Rows × loops", "Own ms", "Total ms", "Shared hit", "Shared read"]
    summary = walk.locator(".plan-summary").inner_text()
    found = re.search(r"shared buffers: (\d+) hit", summary)
    assert found, summary
    hits = int(found.group(1))
    assert hits > 0
    first_row = walk.locator(".plan-table tbody tr").first.locator("td").all_inner_texts()
    assert int(first_row[3]) == hits  # the top node's buffers are the statement's
    walk.locator(".sql summary").click()
    assert "/* sibyl:expand_neighbors */" in walk.locator(".sql pre").inner_text()
    assert walk.locator(".params tbody tr").count() > 10  # the bound values
    walk.locator(".plan-summary").scroll_into_view_if_needed()


def test_the_page_fits_a_narrow_window(open_tab, keys):
    page = open_tab(width=400, height=800)
    sign_in(page, keys["reader"])
    ids = search(page, "type hints")
    # two results ticked are the seeds of one walk: its neighbours hang from a hub
    page.check("#pick-0")
    page.check("#pick-1")
    assert page.input_value("#expand-seeds") == f"{ids[0]}, {ids[1]}"
    page.click("#expand-submit")
    wait_rounds(page, 1)
    assert page.evaluate("() => window.sibylExplorer.graph().nodes('.hub').length") == 1
    assert len(drawn(page)) >= 10
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    wide = page.evaluate(
        """() => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > innerWidth + 1)
        .slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)"""
    )
    assert width[0] <= width[1], f"the page is wider than the window: {width} {wide}"
    box = page.locator("#graph").bounding_box()
    assert box["width"] > 300 and box["height"] > 250
    page.locator("#graph").scroll_into_view_if_needed()


def test_the_guard_stops_and_reports_a_request_to_another_host(browser, served):
    """The other-host check of :func:`open_tab` is real: a page that asks another host is
    caught (and the request never leaves the machine)."""
    context = browser.new_context(base_url=served, bypass_csp=True)  # the page's CSP would stop it
    caught: list[str] = []

    def guard(route: Any) -> None:
        if route.request.url.startswith(served):
            route.continue_()
        else:
            caught.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    try:
        page = context.new_page()
        page.goto("/ui")
        page.evaluate("() => fetch('http://cdn.example.invalid/x.js').catch(() => null)")
        assert caught == ["http://cdn.example.invalid/x.js"]
    finally:
        context.close()
