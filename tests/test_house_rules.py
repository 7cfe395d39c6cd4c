"""House rules of the repository (rule: house-rules), read from the files themselves.

- No file of ``app/`` cites a section of the product contract ("contract §N") or an issue
  number: those point outside the repository. The code names the rule instead
  (``rule: one-read-rule``, ``rules: a, b``), and every name it cites is a rule of
  ``docs/design.md``, whose test files exist.
- The README stays within 150 lines, and its table of settings lists every variable the
  settings read.
"""

from __future__ import annotations

import re
from pathlib import Path

from app.core.settings import PROJECT_ROOT, Settings

APP = PROJECT_ROOT / "app"
DESIGN = PROJECT_ROOT / "docs" / "design.md"
README = PROJECT_ROOT / "README.md"
README_MAX_LINES = 150

OUTSIDE = re.compile(r"contract §|\bissue [0-9]", re.IGNORECASE)
NAME = r"[a-z0-9]+(?:-[a-z0-9]+)+"
CITED = re.compile(rf"\brules?:?\s+({NAME}(?:,\s*(?:#\s*)?{NAME})*)")
RULE_HEADING = re.compile(rf"^### `({NAME})`$", re.MULTILINE)


def sources() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def cited_names(text: str) -> set[str]:
    """The rule names a text cites: ``rule: a``, ``rule a``, ``rules: a, b`` (a list may wrap
    onto a comment's next line)."""
    names: set[str] = set()
    for m in CITED.finditer(text):
        names.update(re.findall(NAME, m.group(1)))
    return names


def design_rules() -> set[str]:
    return set(RULE_HEADING.findall(DESIGN.read_text()))


def test_the_citation_reader_finds_single_listed_and_wrapped_names():
    text = """x = 1  # the walk (rule: bounded-walk)
    (rules: one-write-path, pending-links) and rule span-bound;
    # (rules: search-lanes,
    # same-verbs-both-surfaces) ... a rule is not a rule: unless-hyphenated words follow"""
    assert cited_names(text) == {
        "bounded-walk",
        "one-write-path",
        "pending-links",
        "span-bound",
        "search-lanes",
        "same-verbs-both-surfaces",
        "unless-hyphenated",
    }


def test_no_file_in_app_cites_a_contract_section_or_an_issue():
    found = [
        f"{path.relative_to(PROJECT_ROOT)}:{n}: {line.strip()}"
        for path in sources()
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not found, "cite the rule of docs/design.md by name instead:\n" + "\n".join(found)


def test_design_names_every_rule_the_code_cites():
    rules = design_rules()
    assert len(rules) >= 30, "docs/design.md names its rules in '### `name`' headings"
    cited: dict[str, list[str]] = {}
    for path in sources():
        for name in cited_names(path.read_text()):
            cited.setdefault(name, []).append(str(path.relative_to(PROJECT_ROOT)))
    assert len(cited) >= 20, "the code cites the rules it keeps by name"
    missing = {name: files for name, files in cited.items() if name not in rules}
    assert not missing, f"cited in app/ but not a rule of docs/design.md: {missing}"


def test_every_test_file_design_names_exists():
    named = set(re.findall(r"`(test_[a-z0-9_]+\.py)`", DESIGN.read_text()))
    assert named
    absent = sorted(n for n in named if not (PROJECT_ROOT / "tests" / n).exists())
    assert not absent, f"docs/design.md names tests that do not exist: {absent}"


def test_the_readme_is_read_in_five_minutes():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_readme_lists_every_setting():
    rows = {m for m in re.findall(r"^\| `([A-Z_]+)` \|", README.read_text(), re.MULTILINE)}
    wanted = {
        (
            field.validation_alias if isinstance(field.validation_alias, str) else f"SIBYL_{name}"
        ).upper()
        for name, field in Settings.model_fields.items()
    }
    assert not wanted - rows, f"README's settings table lacks {sorted(wanted - rows)}"
