"""The explorer's page as the service serves it (no browser): ``/ui`` and its assets come from the
package, from this origin only, with the headers that keep the key on the page (the browser
tests in tests/test_ui.py drive the page itself)."""

from __future__ import annotations

import re

import pytest

from app.ui import PAGE_POLICY, STATIC

ASSET = re.compile(r'(?:src|href)="(/ui/assets/[^"]+)"')
ANY_URL = re.compile(r"\b(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


@pytest.mark.parametrize("path", ["/ui", "/ui/"])
async def test_the_page_is_served_with_its_policy(client, path):
    page = await client.get(path)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == PAGE_POLICY
    assert "connect-src 'self'" in PAGE_POLICY and "form-action 'none'" in PAGE_POLICY
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-cache"
    assert 'id="signin-key"' in page.text and 'type="password"' in page.text
    head = await client.head(path)
    assert head.status_code == 200 and head.content == b""


async def test_every_asset_the_page_names_is_shipped_and_cached_for_good(client):
    page = (await client.get("/ui")).text
    assets = ASSET.findall(page)
    kinds = {a.rsplit(".", 1)[1] for a in assets}
    assert kinds == {"js", "css"}
    for path in assets:
        answer = await client.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert answer.headers["x-content-type-options"] == "nosniff"
        expected = "text/css" if path.endswith(".css") else "text/javascript"
        assert answer.headers["content-type"].startswith(expected), path
    # the graph library is a chunk of its own that the page's script imports when signed in
    script = (await client.get(next(a for a in assets if a.endswith(".js")))).text
    chunks = re.findall(r'import\("\./([^"]+\.js)"\)', script)
    assert chunks, "the page's script loads the graph library lazily"
    for chunk in chunks:
        assert (await client.get(f"/ui/assets/{chunk}")).status_code == 200


def test_the_page_and_its_own_code_name_no_other_host():
    """Nothing the page loads names another host: no CDN, no font or script from elsewhere
    (the bundled graph library's own comments and messages are left out of this check; the
    browser tests fail on any request it would make)."""
    own = [STATIC / "index.html", *STATIC.glob("assets/explorer-*")]
    assert len(own) == 3
    for path in own:
        found = ANY_URL.findall(path.read_text())
        assert found == [], f"{path.name} names {found}"


async def test_an_unknown_asset_is_the_one_404(client):
    for path in ("/ui/assets/nothing-here.js", "/ui/assets/../__init__.py", "/ui/nothing"):
        answer = await client.get(path)
        assert answer.status_code == 404, path
        assert answer.json() == {"detail": "Not found"}


async def test_the_page_is_not_part_of_the_api_description(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p.startswith("/ui")]
