"""A Debian package index (``Packages``, as ``apt-get update`` downloads it) as an import file:
the real graph the import benchmark's generated one imitates.

One org ``org_debian`` with one org-visible project ``bookworm``; a memory per package (id
``deb:<name>``, type ``artifact``, its one-line description as the body, version, section,
priority, maintainer, installed size and homepage as metadata); an edge per relationship to a
package of the index (the first alternative of each): ``Depends`` and ``Pre-Depends`` as
``DEPENDS_ON``, ``Recommends``, ``Suggests``, ``Breaks``, ``Conflicts``, ``Enhances`` as such,
``Replaces`` as ``SUPERSEDES`` (often mutual in Debian: those edges close cycles, which
``sibyl-pg import --on-error skip`` leaves out and lists). A package named twice keeps its
first stanza.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ORG = "org_debian"
PROJECT = "bookworm"
RELATIONSHIPS = {
    "Depends": "DEPENDS_ON",
    "Pre-Depends": "DEPENDS_ON",
    "Recommends": "RECOMMENDS",
    "Suggests": "SUGGESTS",
    "Breaks": "BREAKS",
    "Conflicts": "CONFLICTS",
    "Replaces": "SUPERSEDES",
    "Enhances": "ENHANCES",
}
METADATA = ("Version", "Section", "Priority", "Maintainer", "Installed-Size", "Homepage")
_NOT_ID = re.compile(r"[^A-Za-z0-9_.:-]")


def stanzas(text: str) -> Iterator[dict[str, str]]:
    """The fields of each stanza of a ``Packages`` file (continuation lines joined)."""
    fields: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, ""
        elif line[0] in " \t" and key:
            fields[key] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    if fields:
        yield fields


def package_id(name: str) -> str:
    """The memory id of package ``name`` (characters outside the id alphabet become ``_``)."""
    return "deb:" + _NOT_ID.sub("_", name)


def records(text: str) -> list[dict[str, Any]]:
    """The import records of the index ``text``: org, project, packages, then relationships."""
    packages: dict[str, dict[str, str]] = {}
    for fields in stanzas(text):
        packages.setdefault(fields.get("Package", ""), fields)
    packages.pop("", None)
    out: list[dict[str, Any]] = [
        {"kind": "org", "id": ORG, "name": "Debian"},
        {"kind": "project", "id": PROJECT, "org": ORG, "name": "bookworm", "visibility": "org"},
    ]
    edges: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for name, fields in packages.items():
        out.append(
            {
                "kind": "entity",
                "id": package_id(name),
                "org": ORG,
                "type": "artifact",
                "name": name,
                "content": fields.get("Description", ""),
                "project": PROJECT,
                "metadata": {k: fields[k] for k in METADATA if k in fields},
            }
        )
        for field, relationship in RELATIONSHIPS.items():
            for alternatives in fields.get(field, "").split(","):
                target = alternatives.split("|")[0].strip().split(" ")[0].split(":")[0]
                key = (name, relationship, target)
                if target in packages and target != name and key not in seen:
                    seen.add(key)
                    edges.append(
                        {
                            "kind": "edge",
                            "org": ORG,
                            "src": package_id(name),
                            "dst": package_id(target),
                            "relationship": relationship,
                        }
                    )
    return out + edges


def convert(packages: Path, out: Path) -> int:
    """Write the import file of the index at ``packages`` to ``out``; return its line count."""
    rows = records(packages.read_text(encoding="utf-8", errors="replace"))
    with out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")
    return len(rows)
