"""``sibyl-pg bench debian``: a Debian package index as an import file."""

from __future__ import annotations

from bench.debian_import import records

INDEX = """Package: app
Version: 1.0-1
Depends: libc6 (>= 2.34), libfoo | libbar, missing-pkg
Replaces: app-data
Description: An application

Package: app-data
Replaces: app
Description: Data of the app
 extended description line

Package: libc6
Priority: required
Description: GNU C Library

Package: libfoo
Description: Foo library
"""


def test_packages_become_memories_and_relationships_edges():
    rows = records(INDEX)
    entities = {r["id"]: r for r in rows if r["kind"] == "entity"}
    assert sorted(entities) == ["deb:app", "deb:app-data", "deb:libc6", "deb:libfoo"]
    assert entities["deb:app"]["metadata"] == {"Version": "1.0-1"}
    assert entities["deb:app-data"]["content"] == "Data of the app\nextended description line"
    edges = {(r["src"], r["relationship"], r["dst"]) for r in rows if r["kind"] == "edge"}
    assert edges == {
        ("deb:app", "DEPENDS_ON", "deb:libc6"),
        ("deb:app", "DEPENDS_ON", "deb:libfoo"),  # the first alternative; a missing one: none
        ("deb:app", "SUPERSEDES", "deb:app-data"),
        ("deb:app-data", "SUPERSEDES", "deb:app"),  # mutual Replaces: a cycle to refuse
    }
    assert [r["kind"] for r in rows[:2]] == ["org", "project"]
