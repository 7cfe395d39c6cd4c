"""docs/import-format.md's example file imports as the page says (issue 14): through the real
``sibyl-pg import`` command, then read back over REST as each of its users."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from sqlalchemy import text

from app.core.settings import PROJECT_ROOT
from tests.builders import make_key
from tests.conftest import SIBYL_PG

EXAMPLE = PROJECT_ROOT / "docs" / "examples" / "import-example.ndjson"
DOC = PROJECT_ROOT / "docs" / "import-format.md"
KINDS = ("org", "user", "project", "member", "entity", "edge", "mention", "grant")


def import_example(database_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SIBYL_PG), "import", str(EXAMPLE)],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def imported(database_url: str) -> tuple[str, str]:
    """The example imported twice: the two summaries."""
    first, again = import_example(database_url), import_example(database_url)
    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    return first.stdout, again.stdout


def test_the_page_documents_every_kind_and_the_example_uses_each():
    page = DOC.read_text()
    example = EXAMPLE.read_text()
    for kind in KINDS:
        assert f"### `{kind}`" in page, kind
        assert f'"kind":"{kind}"' in example, kind


def test_the_example_imports_and_again_changes_nothing(imported):
    first, again = imported
    lines = len([line for line in EXAMPLE.read_text().splitlines() if line.strip()])
    assert first.startswith(f"imported {lines} lines")
    assert "entity: 7 created" in first
    assert "edge pairs: 1 DEPENDS_ON, 1 SUPERSEDES" in first
    assert again.startswith(f"imported {lines} lines")
    changed = re.findall(r"\b[1-9][0-9]* (?:created|written|updated|repaired)\b", again)
    assert not changed, again


async def test_the_example_reads_as_the_page_says(imported, engine, client):
    keys = {user: await make_key(engine, user) for user in ("user_ann", "user_bob", "user_cy")}

    async def get(user: str, entity: str) -> int:
        r = await client.get(
            f"/api/entities/{entity}", headers={"Authorization": f"Bearer {keys[user]}"}
        )
        return r.status_code

    # Cy (viewer of proj_store) reads the decisions, not Ann's private note; Bob has a grant
    assert await get("user_cy", "adr_postgres") == 200
    assert await get("user_cy", "note_salary") == 404
    assert await get("user_bob", "note_salary") == 200
    assert await get("user_cy", "note_style") == 200  # org scope

    async with engine.connect() as conn:
        lifecycle = (
            await conn.execute(text("SELECT lifecycle FROM entities WHERE id = 'adr_sqlite'"))
        ).scalar()
        mentions = (
            await conn.execute(
                text("SELECT src_id, dst_id, derived FROM mentions WHERE org_id = 'org_example'")
            )
        ).all()
        spans = (
            await conn.execute(
                text(
                    "SELECT breadcrumb FROM passages WHERE parent_id = 'doc_handbook' "
                    "ORDER BY passage_index"
                )
            )
        ).all()
    assert lifecycle == "superseded"
    assert set(mentions) >= {
        ("adr_postgres", "adr_sqlite", True),  # derived from [[adr_sqlite]]
        ("doc_handbook", "adr_postgres", True),
        ("note_style", "doc_handbook", False),  # the explicit mention record
    }
    assert [s.breadcrumb for s in spans] == ["Welcome", "Storage"]

    # the task depends on the newer decision: one hop away for Bob
    r = await client.post(
        "/api/search/expand",
        json={"entity_ids": ["task_migrate"], "relationship_types": ["DEPENDS_ON"]},
        headers={"Authorization": f"Bearer {keys['user_bob']}"},
    )
    assert [n["id"] for n in r.json()["neighbors"]] == ["adr_postgres"]
