"""The PEP corpus converter (app.importers.peps): pure Python, no database.

The full-corpus tests read the real corpus (``SIBYL_PEPS_DIR``, default ``../shared/data/peps``),
parsed once per run by conftest's ``pep_records``, and are skipped when it is absent; the others
build small corpora in a temporary folder.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.importers.peps import (
    ID_RE,
    PepSummary,
    author_slug,
    iter_pep_records,
    parse_authors,
    rst_titles_to_markdown,
    summarize,
)
from tests.conftest import PEPS_DIR

ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1{3,}\s*$")  # a line of one repeated punctuation
HEADING = re.compile(r"^(#{1,6}) \S")
ID_FIELDS = ("id", "org", "project", "user", "owner", "src", "dst")

corpus = pytest.mark.corpus


@pytest.fixture(scope="module")
def records(pep_records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The corpus parsed once per run (conftest's ``pep_records``, shared with ``pep_corpus``)."""
    return pep_records


@pytest.fixture(scope="module")
def entities(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in records if r["kind"] == "entity"}


# ----------------------------------------------------------------------------------------------
# Full corpus


@corpus
def test_corpus_gives_the_issue_counts(records: list[dict[str, Any]]) -> None:
    summary = summarize(records)
    assert (
        summary.entities,
        summary.depends_on_pairs,
        summary.supersedes_pairs,
        summary.mention_pairs,
    ) == (736, 39, 47, 1627)
    assert summary.projects == 5  # core, typing, packaging, governance, release
    kinds = Counter(r["kind"] for r in records)
    assert kinds["org"] == 1
    assert kinds["user"] == summary.users  # no user is emitted twice


@corpus
def test_pep_484_record(entities: dict[str, dict[str, Any]]) -> None:
    pep = entities["pep_0484"]
    assert pep["name"] == "PEP 484: Type Hints"
    assert pep["type"] == "decision"
    assert pep["project"] == "proj_typing"
    assert pep["org"] == "org_python"
    assert (pep["scope"], pep["lifecycle"]) == ("project", "active")
    assert pep["owner"] == "user_guido_van_rossum"
    assert pep["metadata"] == {
        "status": "Final",
        "pep_type": "Standards Track",
        "created": "29-Sep-2014",
        "python_version": "3.5",
        "authors": ["Guido van Rossum", "Jukka Lehtosalo", "Łukasz Langa"],
        "topic": "Typing",
    }
    lines = pep["content"].splitlines()
    assert lines[0] == "# Abstract"
    assert "## Non-goals" in lines  # a subsection of "Rationale and Goals": nesting level 2
    assert "# Rationale and Goals" in lines
    assert ":pep:`3107` introduced syntax for function annotations, but the semantics" in lines
    assert not any(ADORNMENT.match(line) for line in lines)  # PEP 484 uses no tables/transitions


@corpus
def test_every_heading_lost_its_adornment(entities: dict[str, dict[str, Any]]) -> None:
    headings = 0
    for entity_id, entity in entities.items():
        lines = entity["content"].splitlines()
        for i, line in enumerate(lines):
            if HEADING.match(line):
                headings += 1
                after = lines[i + 1] if i + 1 < len(lines) else ""
                before = lines[i - 1] if i else ""
                assert not ADORNMENT.match(after), (entity_id, line)
                assert not ADORNMENT.match(before), (entity_id, line)
    assert headings > 10_000
    # PEP 258 titles its sections with an overline too, and insets one title.
    rejection = entities["pep_0258"]["content"].splitlines()
    assert rejection[0] == "# Rejection Notice"
    assert "# Abstract" in rejection


@corpus
def test_types_follow_the_pep_type(entities: dict[str, dict[str, Any]]) -> None:
    expected = {"Standards Track": "decision", "Informational": "document", "Process": "procedure"}
    for entity in entities.values():
        assert entity["type"] == expected[entity["metadata"]["pep_type"]]
        number = int(entity["id"].removeprefix("pep_"))
        assert entity["name"].startswith(f"PEP {number}: ")


@corpus
def test_draft_peps_are_private_to_their_first_author(
    entities: dict[str, dict[str, Any]],
) -> None:
    pep = entities["pep_0467"]
    assert pep["metadata"]["status"] == "Draft"
    assert (pep["scope"], pep["owner"]) == ("private", "user_alyssa_coghlan")
    drafts = [e for e in entities.values() if e["metadata"]["status"] == "Draft"]
    assert len(drafts) == 49
    for entity in entities.values():
        first_author = f"user_{author_slug(entity['metadata']['authors'][0])}"
        assert entity["owner"] == first_author
        is_draft = entity["metadata"]["status"] == "Draft"
        assert entity["scope"] == ("private" if is_draft else "project")


@corpus
def test_superseded_status_gives_superseded_lifecycle(
    entities: dict[str, dict[str, Any]],
) -> None:
    assert entities["pep_0005"]["lifecycle"] == "superseded"
    superseded = {e["id"] for e in entities.values() if e["lifecycle"] == "superseded"}
    assert superseded == {
        e["id"] for e in entities.values() if e["metadata"]["status"] == "Superseded"
    }
    assert len(superseded) == 25
    assert {e["lifecycle"] for e in entities.values()} == {"active", "superseded"}


@corpus
def test_edges(records: list[dict[str, Any]]) -> None:
    edges = [(r["src"], r["relationship"], r["dst"]) for r in records if r["kind"] == "edge"]
    assert len(edges) == len(set(edges)) == 39 + 47
    # Requires: 3107, 3115, 3119 ; Replaces: 245, 246
    for dst in ("pep_3107", "pep_3115", "pep_3119"):
        assert ("pep_3124", "DEPENDS_ON", dst) in edges
    assert ("pep_3124", "SUPERSEDES", "pep_0245") in edges
    # PEP 5 says "Superseded-By: 387"; PEP 387 does not say "Replaces: 5".
    assert ("pep_0387", "SUPERSEDES", "pep_0005") in edges
    # PEP 387 "Replaces: 291" and PEP 291 "Superseded-By: 387": one edge.
    assert edges.count(("pep_0387", "SUPERSEDES", "pep_0291")) == 1
    assert all(src != dst for src, _, dst in edges)


@corpus
def test_mentions_are_distinct_and_never_self(
    records: list[dict[str, Any]], entities: dict[str, dict[str, Any]]
) -> None:
    mentions = [(r["src"], r["dst"]) for r in records if r["kind"] == "mention"]
    assert len(mentions) == len(set(mentions)) == 1627
    assert all(src != dst for src, dst in mentions)
    assert all(src in entities and dst in entities for src, dst in mentions)
    assert ("pep_0484", "pep_3107") in mentions  # :pep:`3107`
    assert ("pep_0423", "pep_0008") in mentions  # :pep:`8#package-and-module-names`
    assert ("pep_0001", "pep_0012") in mentions  # :pep:`PEP template <12#suggested-sections>`
    assert ("pep_0484", "pep_0484") not in mentions  # PEP 484 cites itself
    assert not any(dst == "pep_0000" for _, dst in mentions)  # PEP 42 cites PEP 0, not in corpus


@corpus
def test_projects_users_and_demo_readers(records: list[dict[str, Any]]) -> None:
    projects = {r["id"]: r for r in records if r["kind"] == "project"}
    assert {p: projects[p]["visibility"] for p in projects} == {
        "proj_core": "org",
        "proj_typing": "private",
        "proj_packaging": "private",
        "proj_governance": "org",
        "proj_release": "org",
    }
    users = {r["id"]: r for r in records if r["kind"] == "user"}
    assert users["user_lukasz_langa"]["handle"] == "lukasz_langa"
    assert "user_fred_l_drake_jr" in users  # "Fred L. Drake, Jr. <fred@fdrake.net>"
    assert users["user_org_admin"]["role"] == "admin"
    assert users["user_outsider"]["role"] == "member"
    members = {(r["project"], r["user"]): r["role"] for r in records if r["kind"] == "member"}
    assert len(members) == sum(r["kind"] == "member" for r in records)  # deduplicated
    assert members[("proj_typing", "user_typing_reader")] == "viewer"
    assert members[("proj_packaging", "user_packaging_reader")] == "viewer"
    assert members[("proj_typing", "user_lukasz_langa")] == "contributor"
    assert not any(u in ("user_org_admin", "user_outsider") for _, u in members)
    assert [p for p, u in members if u == "user_typing_reader"] == ["proj_typing"]
    # PEP 8 has no Topic: core; its authors contribute to proj_core.
    assert members[("proj_core", "user_guido_van_rossum")] == "contributor"


@corpus
def test_all_ids_match_the_contract_pattern(records: list[dict[str, Any]]) -> None:
    checked = 0
    for record in records:
        for field in ID_FIELDS:
            if field in record:
                assert ID_RE.fullmatch(record[field]), (field, record[field])
                checked += 1
    assert checked > 5000
    assert all(re.fullmatch(r"pep_\d{4}", r["id"]) for r in records if r["kind"] == "entity")


def assert_dependency_order(records: list[dict[str, Any]]) -> None:
    """Every id a record refers to was yielded before it, kinds in the §9 order."""
    order = ["org", "user", "project", "member", "entity", "edge", "mention"]
    ranks = [order.index(r["kind"]) for r in records]
    assert ranks == sorted(ranks)
    seen: dict[str, set[str]] = {kind: set() for kind in order}
    for record in records:
        kind = record["kind"]
        if "org" in record:
            assert record["org"] in seen["org"]
        if kind == "member":
            assert record["project"] in seen["project"] and record["user"] in seen["user"]
        if kind == "entity":
            assert record["project"] in seen["project"] and record["owner"] in seen["user"]
        if kind in ("edge", "mention"):
            assert record["src"] in seen["entity"] and record["dst"] in seen["entity"]
        if "id" in record:
            seen[kind].add(record["id"])


@corpus
def test_records_come_in_dependency_order(records: list[dict[str, Any]]) -> None:
    assert_dependency_order(records)


# ----------------------------------------------------------------------------------------------
# Small corpora and helpers (no corpus needed)


def write_pep(
    folder: Path, number: int, headers: str, body: str = "Abstract\n========\n\nx\n"
) -> None:
    text = f"PEP: {number}\n{headers.strip()}\n\n\n{body}"
    (folder / f"pep-{number:04d}.rst").write_text(text, encoding="utf-8")


def test_headers_are_parsed_robustly(tmp_path: Path) -> None:
    write_pep(
        tmp_path,
        1,
        """
Title: First
Author: Ann Example <ann@example.org>,
        bob@example.org (Bob Builder),
        Fred L. Drake, Jr. <fred@fdrake.net>
Status:      Active
Type:    Process
Created: 01-Jan-2000
""",
        "Intro\n=====\n\nSee :pep:`2`, :pep:`the third <3#anchor>`, :pep:`1`, :pep:`9999`.\n"
        "Again :pep:`2` and :pep:`Second\n<2>`.\n",
    )
    write_pep(
        tmp_path,
        2,
        """
Title: Second
Author: Bob Builder <bob@example.org>
Status: Superseded
Type: Standards Track
Topic: Typing, Packaging
Created: 02-Jan-2000
Requires: 1, 9999
Superseded-By: 3 (after a long discussion)
""",
    )
    write_pep(
        tmp_path,
        3,
        """
Title: Third
  continued
Author: Łukasz Ąęó <l@example.org>
Status: Draft
Type: Informational
Topic: Education
Created: 03-Jan-2000
Requires: 1,2
Replaces: 2, https://peps.python.org/pep-0001/
""",
    )
    records = list(iter_pep_records(tmp_path))
    assert_dependency_order(records)
    entities = {r["id"]: r for r in records if r["kind"] == "entity"}
    assert entities["pep_0001"]["metadata"]["authors"] == [
        "Ann Example",
        "Bob Builder",
        "Fred L. Drake, Jr.",
    ]
    assert entities["pep_0001"]["type"] == "procedure"
    assert entities["pep_0001"]["project"] == "proj_core"
    assert entities["pep_0001"]["metadata"]["status"] == "Active"
    assert entities["pep_0002"]["project"] == "proj_typing"  # first topic wins
    assert entities["pep_0002"]["lifecycle"] == "superseded"
    assert entities["pep_0003"]["name"] == "PEP 3: Third continued"
    assert entities["pep_0003"]["project"] == "proj_education"
    assert (entities["pep_0003"]["scope"], entities["pep_0003"]["owner"]) == (
        "private",
        "user_lukasz_aeo",
    )
    assert entities["pep_0003"]["metadata"]["python_version"] is None
    projects = {r["id"]: r for r in records if r["kind"] == "project"}
    assert projects["proj_education"] == {
        "kind": "project",
        "id": "proj_education",
        "org": "org_python",
        "name": "Education",
        "visibility": "org",
    }
    edges = {(r["src"], r["relationship"], r["dst"]) for r in records if r["kind"] == "edge"}
    assert edges == {
        ("pep_0002", "DEPENDS_ON", "pep_0001"),
        ("pep_0003", "DEPENDS_ON", "pep_0001"),
        ("pep_0003", "DEPENDS_ON", "pep_0002"),
        ("pep_0003", "SUPERSEDES", "pep_0002"),  # stated twice, emitted once
        ("pep_0003", "SUPERSEDES", "pep_0001"),  # from the URL
    }
    mentions = [(r["src"], r["dst"]) for r in records if r["kind"] == "mention"]
    assert mentions == [("pep_0001", "pep_0002"), ("pep_0001", "pep_0003")]
    assert summarize(records) == PepSummary(
        entities=3, depends_on_pairs=3, supersedes_pairs=2, mention_pairs=2, users=8, projects=6
    )
    assert records == list(iter_pep_records(tmp_path))  # deterministic


def test_parse_authors_forms() -> None:
    assert parse_authors("Fred L. Drake, Jr. <fred@fdrake.net>") == ["Fred L. Drake, Jr."]
    assert parse_authors("guido@python.org (Guido van Rossum), Tim Peters") == [
        "Guido van Rossum",
        "Tim Peters",
    ]
    assert parse_authors("Rich Chiodo <rchiodo at microsoft.com>, Eric  Traut,") == [
        "Rich Chiodo",
        "Eric Traut",
    ]
    assert parse_authors("<solo@example.org>") == ["solo"]
    assert parse_authors("A, A, B") == ["A", "B"]
    assert parse_authors(" , ") == []


def test_author_slug() -> None:
    assert author_slug("Łukasz Langa") == "lukasz_langa"
    assert author_slug("Marc-André Lemburg") == author_slug("Marc-Andre Lemburg")
    assert author_slug("Martin von Löwis") == "martin_von_lowis"
    assert author_slug("A.M. Kuchling") == "a_m_kuchling"
    assert author_slug("Fred L. Drake, Jr.") == "fred_l_drake_jr"
    odd = author_slug("李小龍")
    assert odd.startswith("anon_") and ID_RE.fullmatch(f"user_{odd}")


def test_titles_become_markdown_headings() -> None:
    body = (
        "==========\n"
        " Overview \n"
        "==========\n"
        "\n"
        "Text with :pep:`PEP 8 <8#names>` and :unknownrole:`x`.\r\n"
        "\n"
        "Details\n"
        "-------\n"
        "\n"
        "Example::\n"
        "\n"
        "    Not a title\n"
        "    ===========\n"
        "\n"
        ".. sphinx-only-directive:: arg\n"
        "\n"
        "   Also not a title\n"
        "   ================\n"
        "\n"
        "Deeper\n"
        "~~~~~~\n"
        "\n"
        "====\n"
        "Next\n"
        "====\n"
        "\n"
        "text\n"
        "\n"
        "----------\n"
        "\n"
        "end\n"
    )
    assert rst_titles_to_markdown(body) == (
        "# Overview\n"
        "\n"
        "Text with :pep:`PEP 8 <8#names>` and :unknownrole:`x`.\r\n"
        "\n"
        "## Details\n"
        "\n"
        "Example::\n"
        "\n"
        "    Not a title\n"
        "    ===========\n"
        "\n"
        ".. sphinx-only-directive:: arg\n"
        "\n"
        "   Also not a title\n"
        "   ================\n"
        "\n"
        "### Deeper\n"
        "\n"
        "# Next\n"
        "\n"
        "text\n"
        "\n"
        "----------\n"
        "\n"
        "end\n"
    )


def test_text_without_sections_is_unchanged() -> None:
    body = "Just a paragraph.\n\n    code\n\n* a list\n"
    assert rst_titles_to_markdown(body) == body


def test_bad_corpus_folders_fail_at_call_time(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        iter_pep_records(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        iter_pep_records(tmp_path)  # no pep-NNNN.rst file
    text = "PEP: 8\nTitle: T\nAuthor: A\nStatus: Active\nType: Process\n\nBody\n"
    (tmp_path / "pep-0007.rst").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"pep-0007\.rst"):
        iter_pep_records(tmp_path)


def test_worker_processes_give_the_same_records(tmp_path: Path) -> None:
    """Bodies parsed by worker processes give the records one process gives, in the same order:
    on every sixth PEP of the corpus (each body is parsed on its own, so a sample meets the
    pool's hand-out and merge as the whole corpus does, at a sixth of the parsing)."""
    if not PEPS_DIR.is_dir():
        pytest.skip(f"PEP corpus not found at {PEPS_DIR}")
    sample = sorted(PEPS_DIR.glob("pep-*.rst"))[::6]
    for path in sample:
        (tmp_path / path.name).symlink_to(path)
    alone = list(iter_pep_records(tmp_path))
    assert sum(r["kind"] == "entity" for r in alone) == len(sample) > 100
    assert list(iter_pep_records(tmp_path, workers=2)) == alone
