"""What a real file handed to ``sibyl-pg import`` can be (a new user's trial, 2026-12-04): a pipe,
a file opening with a byte order mark, a reject file that names the input, an unwritable reject
file, types written in another case, one user id in two orgs, an interrupted import. Each is a
pair: what is refused is refused before anything is read or written, and what is accepted
imports exactly as the plain file would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.importers import ndjson
from tests.builders import import_dicts
from tests.team import Team, call, scalar

SIBYL = str(Path(sys.executable).with_name("sibyl-pg"))


def notes(t: Team, n: int, prefix: str = "in") -> list[dict[str, Any]]:
    """``n`` notes of ``t``'s project p1."""
    return [
        {
            "kind": "entity",
            "org": t.org,
            "id": f"{prefix}{i}",
            "type": "note",
            "name": f"Note {i}",
            "content": f"Body {i}.",
            "project": "p1",
            "owner": t.u("ann"),
        }
        for i in range(n)
    ]


def ndjson_text(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def run(database_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run(
        [SIBYL, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


async def count(engine, t: Team, prefix: str) -> int:
    return await scalar(
        engine,
        "SELECT count(*) FROM entities WHERE org_id = :o AND id LIKE :p",
        o=t.org,
        p=prefix + "%",
    )


async def test_a_pipe_is_read_once_and_imported_whole(engine, database_url):
    """``sibyl-pg import /dev/stdin`` imported 0 lines with exit 0 (the input was read twice:
    counted, then imported); a named pipe hung. The pair: the same records from a pipe and
    from a file give the same memories."""
    t = await Team().load(engine)
    piped = run(database_url, "import", "/dev/stdin", stdin=ndjson_text(notes(t, 7, "pipe")))
    assert piped.returncode == 0, piped.stderr
    assert "entity: 7 created" in piped.stdout
    assert await count(engine, t, "pipe") == 7


def test_a_pipe_with_skip_needs_a_named_reject_file(database_url, tmp_path):
    """Skipping lines of a pipe wrote ``/dev/stdin.rejects.ndjson``; it asks for ``--rejects``
    before reading anything. With one, it runs."""
    refused = run(database_url, "import", "/dev/stdin", "--on-error", "skip", stdin="{}\n")
    assert refused.returncode == 1 and "needs --rejects FILE" in refused.stderr
    assert not Path("/dev/stdin.rejects.ndjson").exists()
    target = tmp_path / "refused.ndjson"
    done = run(
        database_url,
        "import",
        "/dev/stdin",
        "--on-error",
        "skip",
        "--rejects",
        str(target),
        stdin="{}\n",
    )
    assert done.returncode == 3, done.stderr
    assert [json.loads(x)["line"] for x in target.read_text().splitlines()] == [1]


async def test_a_reject_file_naming_the_input_is_refused_and_the_input_kept(
    engine, database_url, tmp_path
):
    """``--rejects`` equal to the input truncated the input before it was read (data loss).
    It is refused, by any spelling of the path, and the input is left as it was."""
    t = await Team().load(engine)
    path = tmp_path / "in.ndjson"
    body = ndjson_text(notes(t, 3, "same"))
    path.write_text(body)
    (tmp_path / "link.ndjson").symlink_to(path)
    for spelling in (str(path), str(tmp_path / "." / "in.ndjson"), str(tmp_path / "link.ndjson")):
        done = run(database_url, "import", str(path), "--on-error", "skip", "--rejects", spelling)
        assert done.returncode == 1 and "is the file being imported" in done.stderr
        assert path.read_text() == body
    assert await count(engine, t, "same") == 0
    other = tmp_path / "out.ndjson"
    done = run(database_url, "import", str(path), "--on-error", "skip", "--rejects", str(other))
    assert done.returncode == 0, done.stderr
    assert await count(engine, t, "same") == 3


async def test_an_unwritable_reject_file_is_named_and_nothing_is_written(
    engine, database_url, tmp_path
):
    """An unwritable ``--rejects`` path was reported as a database fault (DATABASE_URL hint)."""
    t = await Team().load(engine)
    path = tmp_path / "in.ndjson"
    path.write_text(ndjson_text(notes(t, 2, "unw")))
    target = tmp_path / "no-such-dir" / "refused.ndjson"
    done = run(database_url, "import", str(path), "--on-error", "skip", "--rejects", str(target))
    assert done.returncode == 1, done.stderr
    assert f"cannot write the reject file {target}" in done.stderr
    assert "DATABASE_URL" not in done.stderr and "Traceback" not in done.stderr
    assert await count(engine, t, "unw") == 0


async def test_a_byte_order_mark_opening_the_file_is_not_part_of_the_record(
    engine, database_url, tmp_path
):
    """A file saved with a UTF-8 byte order mark was refused at line 1 with Python's codec hint
    ("decode using utf-8-sig"). At the start of the file it is skipped; inside, the line is
    refused in words that name no codec."""
    t = await Team().load(engine)
    lines = ndjson_text(notes(t, 3, "bom")).splitlines(keepends=True)
    path = tmp_path / "bom.ndjson"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(lines).encode())
    done = run(database_url, "import", str(path))
    assert done.returncode == 0, done.stderr
    assert await count(engine, t, "bom") == 3

    inside = tmp_path / "bom-inside.ndjson"
    inside.write_bytes(
        ndjson_text(notes(t, 1, "bom_in")).encode() + b"\xef\xbb\xbf" + lines[0].encode()
    )
    done = run(database_url, "import", str(inside))
    assert done.returncode == 1
    assert "line 2: not valid JSON (a byte order mark before the record)" in done.stderr
    assert "utf-8-sig" not in done.stderr
    assert await count(engine, t, "bom_in") == 0


async def test_a_type_is_stored_as_rest_stores_it(engine, client):
    """The importer refused ``"NOTE"`` and ``" note "`` as malformed where REST stores
    ``note``, and called ``"Passage"`` malformed where REST refuses it as a reserved type."""
    t = await Team().load(engine)
    recs = notes(t, 3, "typ")
    recs[0]["type"], recs[1]["type"], recs[2]["type"] = "NOTE", " note ", "Passage"
    refused: list[ndjson.Refusal] = []
    await ndjson.import_records(
        engine,
        ndjson.from_dicts(recs),
        on_error="skip",
        on_refused=refused.append,
    )
    stored = await scalar(
        engine,
        "SELECT string_agg(id || '=' || type, ',' ORDER BY id) FROM entities"
        " WHERE org_id = :o AND id LIKE 'typ%'",
        o=t.org,
    )
    assert stored == "typ0=note,typ1=note"
    assert [(r.line, r.rule) for r in refused] == [(3, "reserved type")]

    key = await t.key(engine, "ann")
    for sent_type, expected in (("NOTE", 201), (" note ", 201), ("Passage", 400)):
        body = {"type": sent_type, "name": "N", "project": "p1"}
        sent = await call(client, "POST", "/api/entities", key, json=body)
        assert sent.status_code == expected, sent.text
        if expected == 201:
            assert sent.json()["type"] == "note"
        else:
            assert sent.json()["detail"] == refused[0].reason


async def test_one_user_id_in_two_orgs_of_one_file_keeps_the_first(engine):
    """A file stating user u in org A, then u in org B, moved u to B (A lost its owner), where
    two imports refuse the second (ids are unique across orgs). One file now does what two do:
    the first line holds and the second is refused."""
    a, b = Team(), Team()
    user = "u_twice_" + a.org
    recs: list[dict[str, Any]] = [
        {"kind": "org", "id": a.org, "name": "A"},
        {"kind": "org", "id": b.org, "name": "B"},
        {"kind": "user", "id": user, "org": a.org, "handle": "twice", "role": "owner"},
        {"kind": "user", "id": user, "org": b.org, "handle": "twice", "role": "owner"},
    ]
    refused: list[ndjson.Refusal] = []
    await ndjson.import_records(
        engine, ndjson.from_dicts(recs), on_error="skip", on_refused=refused.append
    )
    assert [(r.line, r.rule) for r in refused] == [(4, "id taken")]
    assert await scalar(engine, "SELECT org_id FROM users WHERE id = :u", u=user) == a.org

    # the pair: the same two lines in two imports are refused the same way
    other = "u_split_" + a.org
    await import_dicts(engine, [{**recs[2], "id": other}])
    with pytest.raises(ndjson.ImportError_, match="exists in another org"):
        await import_dicts(engine, [{**recs[3], "id": other}])
    assert await scalar(engine, "SELECT org_id FROM users WHERE id = :u", u=other) == a.org


class _CancelWhileWriting:
    """A progress display that cancels the import's task once ``after`` lines are written."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.done = 0
        self.label = ""
        self.task = asyncio.current_task()

    def phase(self, label: str, total: int | None) -> None:
        self.label = label

    def advance(self, n: int) -> None:
        if self.label == "writing":
            self.done += n
            if self.done >= self.after and self.task is not None:
                self.task.cancel()


@pytest.mark.parametrize("atomic", [True, False])
async def test_an_interrupted_import_says_what_stays_written(engine, atomic):
    """Ctrl-C while writing ended in a traceback (``PendingRollbackError``: the connection,
    cancelled mid-statement, could not roll back) and a ``--commit-batches`` import did not say
    which lines were committed. It raises ``ImportInterrupted`` saying so, and what it says is
    what the database holds: nothing (all or nothing), or exactly the committed batches."""
    t = await Team().load(engine)
    recs = notes(t, 300, "intr")

    async def interrupted() -> None:
        await ndjson.import_records(
            engine,
            ndjson.from_dicts(recs),
            batch_size=100,
            atomic=atomic,
            progress=_CancelWhileWriting(after=150),
        )

    with pytest.raises(ndjson.ImportInterrupted) as caught:
        await asyncio.create_task(interrupted())
    stored = await count(engine, t, "intr")
    if atomic:
        assert str(caught.value) == "nothing of the file was written" and stored == 0
    else:
        assert str(caught.value).startswith(f"lines 1-{stored} were committed") and stored >= 100
    # the pair: uninterrupted, it writes every line
    await import_dicts(engine, recs)
    assert await count(engine, t, "intr") == 300
