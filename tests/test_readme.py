"""The README and docs/api.md run as pasted (rule: house-rules): their marked shell blocks are
executed against a real ``sibyl-pg serve`` and every outcome they state is checked, so the
documents and the behaviour cannot drift.

How a block takes part: the line right before its ```` ```bash ```` fence is
``<!-- readme-test -->`` (an HTML comment: invisible on GitHub). Such a block is run with
``bash -euo pipefail``, all marked blocks in one shell, in the order of :data:`PAGES` and of
each page, as a user pasting them into one terminal would, from a folder holding
``.data/demo-keys.env`` minted by the very function ``make run`` uses
(:func:`app.cli.demo_keys`). ``http://127.0.0.1:8000`` is replaced by the test server's address.

What is checked: every ``curl`` call of a marked block runs (a shell function wraps ``curl`` and
records each call's HTTP status and output). A call whose command carries a comment
``# → STATUS`` must answer STATUS, and each ```fragment``` in backticks after it must appear in
its output (case-insensitive, so header names match as ``curl -i`` prints them). The number of
calls made must equal the number of ``curl`` commands in the marked blocks. The README's own
blocks must call each verb once at least (:data:`VERBS`), with a stated outcome.

The server: ``sibyl-pg serve`` (uvicorn) on a free port, in a subprocess, over this run's fresh
test database holding the real PEP corpus (the session's ``served`` fixture, shared with the
explorer's browser tests).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.core.settings import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
PAGES = [README, PROJECT_ROOT / "docs" / "api.md"]
"""The documents whose marked blocks run, in this order, in one shell."""
VERBS = {
    "search": "/api/search ",
    "context": "/api/context/pack",
    "expand_neighbors": "/api/search/expand",
    "fetch_slice": "/api/search/slice",
    "a write": "-X POST http://127.0.0.1:8000/api/entities",
}
"""What a README call of each verb holds (its command text, a space after a bare route)."""
MARK = "<!-- readme-test -->"
EXPECT = re.compile(r"→\s*(\d{3})((?:\s*`[^`]+`)*)")
FRAGMENT = re.compile(r"`([^`]+)`")


@dataclass
class Call:
    """One ``curl`` command of a marked block and what the README says it answers."""

    command: str
    status: int | None = None
    fragments: list[str] = field(default_factory=list)


def marked_blocks(text: str) -> list[str]:
    """The bodies of the ```` ```bash ```` blocks right after a ``<!-- readme-test -->`` line."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        assert lines[i + 1].strip() == "```bash", (
            f"README line {i + 2}: {MARK} must precede ```bash"
        )
        end = lines.index("```", i + 2)
        blocks.append("\n".join(lines[i + 2 : end]))
    return blocks


def _split_comment(line: str, quoted: str | None) -> tuple[str, str, str | None]:
    """``line`` as (code, comment, open quote at its end), given the quote open at its start."""
    for i, ch in enumerate(line):
        if quoted:
            if ch == quoted:
                quoted = None
        elif ch in "'\"":
            quoted = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i:], None
    return line, "", quoted


def curl_calls(block: str) -> list[Call]:
    """Every ``curl`` command of ``block`` (a command spans continuation lines and multi-line
    quotes) with the ``# → STATUS `fragment`...`` its comments state."""
    calls: list[Call] = []
    current: Call | None = None
    quoted: str | None = None
    for line in block.splitlines():
        starts = current is None and quoted is None
        code, comment, quoted = _split_comment(line, quoted)
        if starts and code.strip().startswith("curl "):
            current = Call(command=code.strip())
            calls.append(current)
        elif current is not None:
            current.command += "\n" + code
        if current is not None:
            expected = EXPECT.search(comment)
            if expected:
                current.status = int(expected.group(1))
                current.fragments = FRAGMENT.findall(expected.group(2))
            if quoted is None and not code.rstrip().endswith("\\"):
                current = None
    return calls


def test_the_block_parser_reads_commands_statuses_and_fragments():
    block = """# a comment, don't count this
curl -s "${H[@]}" -X POST $API/entities -d '{"id": "a",
  "name": "a # not a comment"}'   # → 201 `"id":"a"` `"revision":1`
curl -s $API/x \\
  -H 'If-Match: "1"'  # → 412
curl -s $API/y
echo done  # → 999"""
    calls = curl_calls(block)
    assert [(c.status, c.fragments) for c in calls] == [
        (201, ['"id":"a"', '"revision":1']),
        (412, []),
        (None, []),
    ]


CURL_SHIM = r"""
__n=0
curl() {
  __n=$((__n + 1))
  command curl -w '%{stderr}%{http_code}' "$@" >"$README_OUT/$__n.body" 2>"$README_OUT/$__n.status"
  cat "$README_OUT/$__n.body"; echo
}
"""


@pytest.mark.corpus
def test_the_readme_runs_as_pasted(served, tmp_path: Path):
    from app.cli.main import demo_keys

    readme = [call for block in marked_blocks(README.read_text()) for call in curl_calls(block)]
    for verb, route in VERBS.items():
        assert any(route in c.command and c.status for c in readme), f"README: no {verb} call"
    blocks = [block for page in PAGES for block in marked_blocks(page.read_text())]
    assert len(blocks) >= 4, f"mark the runnable blocks with {MARK}"
    calls = [call for block in blocks for call in curl_calls(block)]
    assert sum(call.status is not None for call in calls) >= 20

    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    demo_keys(work / ".data" / "demo-keys.env")  # what `make run` does, on the test database
    script = CURL_SHIM + "\n".join(blocks).replace("http://127.0.0.1:8000", served)
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env={**os.environ, "README_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr + ran.stdout[-2000:]

    made = len(list(out.glob("*.status")))
    assert made == len(calls), f"{made} curl calls ran, the marked blocks hold {len(calls)}"
    for n, call in enumerate(calls, start=1):
        status = int((out / f"{n}.status").read_text() or 0)
        body = (out / f"{n}.body").read_text()
        where = f"call {n}: {call.command[:160]}"
        assert status < 500, f"{where}\n→ {status} {body[:300]}"
        if call.status is not None:
            assert status == call.status, f"{where}\n→ {status} {body[:300]}"
        for fragment in call.fragments:
            assert fragment.lower() in body.lower(), f"{where}\n{fragment!r} not in {body[:600]}"
