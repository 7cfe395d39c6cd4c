"""``/docs`` and ``/redoc`` render without any network but this server: every script, style,
icon and document their pages name is served by the service itself (the bundled Swagger UI and
ReDoc files of ``fastapi-offline``), and no page names another host."""

from __future__ import annotations

import re

import pytest

from app.api.docs import ASSETS

# src="...", href="...", spec-url="..." in the markup; url: '...' and oauth2RedirectUrl: '...'
# in Swagger UI's inline start-up script
NAMED = re.compile(
    r"""(?:\b(?:src|href|spec-url)=|\b(?:url|oauth2RedirectUrl)\s*:\s*)["']([^"']+)["']"""
)
OTHER_HOST = re.compile(r"\b(?:https?:)?//[A-Za-z0-9.-]+")


async def _named_urls(client, page: str) -> tuple[str, list[str]]:
    answer = await client.get(page)
    assert answer.status_code == 200, page
    assert answer.headers["content-type"].startswith("text/html")
    return answer.text, NAMED.findall(answer.text)


@pytest.mark.parametrize(
    ("page", "must_name"),
    [
        ("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png", "openapi.json"}),
        ("/redoc", {"redoc.standalone.js", "favicon.png", "openapi.json"}),
    ],
)
async def test_every_url_a_docs_page_names_is_served_here(client, page, must_name):
    html, urls = await _named_urls(client, page)
    assert OTHER_HOST.findall(html) == [], f"{page} names another host"
    assert {u.rsplit("/", 1)[-1] for u in urls} >= must_name, urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        answer = await client.get(url)
        assert answer.status_code == 200, url
        assert len(answer.content) > 0, url
        if url.endswith(".js"):
            assert "javascript" in answer.headers["content-type"], url
        elif url.endswith(".css"):
            assert answer.headers["content-type"].startswith("text/css"), url


def test_the_scripts_are_swagger_ui_and_redoc_as_shipped():
    """The files served are the package's own (not an empty stand-in): Swagger UI's bundle
    defines ``SwaggerUIBundle``, ReDoc's defines ``Redoc``."""
    assert "SwaggerUIBundle" in (ASSETS / "swagger-ui-bundle.js").read_text()
    assert "Redoc" in (ASSETS / "redoc.standalone.js").read_text()


async def test_the_oauth2_redirect_page_and_an_unknown_asset(client):
    assert (await client.get("/docs/oauth2-redirect")).status_code == 200
    missing = await client.get("/docs/assets/nothing-here.js")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not found"}


async def test_the_docs_pages_are_not_part_of_the_api_description(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p.startswith(("/docs", "/redoc"))]
