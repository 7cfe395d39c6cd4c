"""What a real file handed to ``sibyl-pg import`` can be (a new user's trial, 2026-12-04): a pipe,
a file opening with a byte order mark, a reject file that names the input, an unwritable reject
file, types written in another case, one user id in two orgs, an interrupted import. Each is a
pair: what is refused is refused before anything is read or written, and what is accepted
imports exactly as the plain file would."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.core.settings import PROJECT_ROOT
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


async def import_skipping(engine, recs: list[dict[str, Any]]) -> list[ndjson.Refusal]:
    """Import ``recs`` with ``on_error="skip"``; the refused lines, in line order."""
    refused: list[ndjson.Refusal] = []
    await ndjson.import_records(
        engine, ndjson.from_dicts(recs), on_error="skip", on_refused=refused.append
    )
    return refused


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
    assert refused.returncode == 2 and "needs --rejects FILE" in refused.stderr
    assert not Path("/dev/stdin.rejects.ndjson").exists()
    # stdin redirected from a file is a file, but under /dev: no reject file beside it either
    source = tmp_path / "in.ndjson"
    source.write_text("{}\n")
    with source.open() as stdin:
        redirected = subprocess.run(
            [SIBYL, "import", "/dev/stdin", "--on-error", "skip"],
            env={**os.environ, "DATABASE_URL": database_url},
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert redirected.returncode == 2 and "needs --rejects FILE" in redirected.stderr
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
    refused = await import_skipping(engine, recs)
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
    refused = await import_skipping(engine, recs)
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


async def test_a_line_refused_for_a_memory_whose_last_line_was_refused_is_tried_again(
    engine, database_url, tmp_path
):
    """With skip, memory d2's last line (type passage) was refused and its earlier line written
    in its place, but an edge to d2 stated twice was also refused ("missing reference"), in the
    first run only (a second run, d2 stored, accepted it). Now only the passage line is
    refused, on every run; the pair: an edge to a memory with no line at all is refused."""
    t = await Team().load(engine)
    o = t.org
    recs: list[dict[str, Any]] = [
        {"kind": "entity", "org": o, "id": "d1", "type": "note", "name": "d1", "scope": "org"},
        {"kind": "entity", "org": o, "id": "d2", "type": "note", "name": "good", "scope": "org"},
        {"kind": "entity", "org": o, "id": "d2", "type": "passage", "name": "bad", "scope": "org"},
        {"kind": "edge", "org": o, "src": "d1", "dst": "d2", "relationship": "RELATES_TO"},
        {"kind": "edge", "org": o, "src": "d1", "dst": "d2", "relationship": "RELATES_TO"},
        {"kind": "edge", "org": o, "src": "d1", "dst": "nowhere", "relationship": "RELATES_TO"},
    ]
    path = tmp_path / "dup.ndjson"
    path.write_text(ndjson_text(recs))
    target = tmp_path / "dup.rejects.ndjson"
    for _ in range(2):
        done = run(
            database_url, "import", str(path), "--on-error", "skip", "--rejects", str(target)
        )
        assert done.returncode == 3, done.stderr
        listed = [json.loads(x) for x in target.read_text().splitlines()]
        assert [(r["line"], r["rule"]) for r in listed] == [
            (3, "reserved type"),
            (6, "missing reference"),
        ]
    assert (
        await scalar(engine, "SELECT name FROM entities WHERE org_id = :o AND id = 'd2'", o=o)
        == "good"
    )
    assert await scalar(engine, "SELECT count(*) FROM edges WHERE org_id = :o", o=o) == 1


async def test_a_reject_file_that_fills_up_is_said_so_not_blamed_on_the_database(
    engine, database_url, tmp_path
):
    """``--rejects /dev/full`` wrote the lines, then said "cannot use the database" (exit 2),
    and the refused lines were listed nowhere. It says the lines were written and the reject
    file was not, exit 1; the pair: a writable reject file, exit 3 and its list."""
    t = await Team().load(engine)
    recs = notes(t, 2, "full")
    recs.append({**recs[0], "id": "passage_full"})
    path = tmp_path / "full.ndjson"
    path.write_text(ndjson_text(recs))
    done = run(database_url, "import", str(path), "--on-error", "skip", "--rejects", "/dev/full")
    assert done.returncode == 1, done.stderr
    assert "every accepted line was written, but the reject file /dev/full" in done.stderr
    assert "DATABASE_URL" not in done.stderr
    assert await count(engine, t, "full") == 2
    kept = tmp_path / "kept.ndjson"
    done = run(database_url, "import", str(path), "--on-error", "skip", "--rejects", str(kept))
    assert done.returncode == 3
    assert [json.loads(x)["line"] for x in kept.read_text().splitlines()] == [3]


def test_rejects_without_skip_and_a_reject_directory_are_usage_errors(database_url, tmp_path):
    """``--rejects`` without ``--on-error skip`` was ignored; a directory given as ``--rejects``
    was exit 2 where the default path being one was exit 1."""
    path = tmp_path / "in.ndjson"
    path.write_text('{"kind": "org", "id": "org_rejects_usage", "name": "O"}\n')
    done = run(database_url, "import", str(path), "--rejects", str(tmp_path / "r.ndjson"))
    assert done.returncode == 2 and "--on-error skip" in done.stderr
    done = run(database_url, "import", str(path), "--on-error", "skip", "--rejects", str(tmp_path))
    assert done.returncode == 1 and "cannot write the reject file" in done.stderr
    done = run(database_url, "import", str(path), "--on-error", "skip")  # the pair
    assert done.returncode == 0, done.stderr


async def test_a_name_is_stored_as_rest_stores_it(engine, client):
    """The importer kept a name's surrounding spaces where REST strips them, and refused a
    blank name with a message of its own. Both now go through REST's rule."""
    t = await Team().load(engine)
    recs = notes(t, 4, "nm")
    recs[0]["name"], recs[1]["name"] = "  padded name  ", "   "
    recs[2]["name"], recs[3]["name"] = "a\u001b[31m", "a\u202eb"  # ANSI escape, bidi override
    refused = await import_skipping(engine, recs)
    stored = await scalar(
        engine, "SELECT name FROM entities WHERE org_id = :o AND id = 'nm0'", o=t.org
    )
    key = await t.key(engine, "ann")
    sent = await call(
        client,
        "POST",
        "/api/entities",
        key,
        json={"type": "note", "name": "  padded name  ", "project": "p1"},
    )
    assert sent.status_code == 201 and stored == sent.json()["name"] == "padded name"
    blank = await call(
        client, "POST", "/api/entities", key, json={"type": "note", "name": "   ", "project": "p1"}
    )
    assert blank.status_code == 400
    said = [blank.json()["detail"]]
    for name in ("a\u001b[31m", "a\u202eb"):
        bad = await call(
            client,
            "POST",
            "/api/entities",
            key,
            json={"type": "note", "name": name, "project": "p1"},
        )
        assert bad.status_code == 400
        said.append(bad.json()["detail"])
    assert [(r.line, r.rule, r.reason) for r in refused] == [
        (n, "refused by a rule", reason) for n, reason in zip((2, 3, 4), said, strict=True)
    ]


async def test_an_all_or_nothing_stop_names_the_record(engine):
    """A rule's refusal stopped the import without naming the record ("line 5: type must be a
    lower-case word ..."); it names it, and a reason that names it already is left alone."""
    t = await Team().load(engine)
    recs = notes(t, 2, "stop")
    recs[1]["type"] = "9bad"
    with pytest.raises(ndjson.ImportError_) as caught:
        await import_dicts(engine, recs)
    assert str(caught.value).startswith("line 2: entity 'stop1': type must be a lower-case word")
    assert caught.value.reason.startswith("type must be")  # REST's message, as REST says it
    edge = {"kind": "edge", "org": t.org, "src": "n1", "dst": "gone", "relationship": "X"}
    with pytest.raises(ndjson.ImportError_) as caught:
        await import_dicts(engine, [edge])
    assert str(caught.value) == f"line 1: edge dst 'gone' does not exist in org '{t.org}'"


async def test_an_interrupted_skip_import_keeps_the_refusals_of_its_committed_batches(engine):
    """Ctrl-C during a ``--commit-batches --on-error skip`` import left an empty reject file
    although committed batches held refused lines: the refusals were told only at the end.
    They are told as their batch commits."""
    t = await Team().load(engine)
    recs = notes(t, 300, "ib")
    for i in (10, 120):  # one refused line in each of the first two batches
        recs[i] = {**recs[i], "type": "passage"}
    told: list[ndjson.Refusal] = []

    async def interrupted() -> None:
        await ndjson.import_records(
            engine,
            ndjson.from_dicts(recs),
            batch_size=100,
            atomic=False,
            on_error="skip",
            on_refused=told.append,
            progress=_CancelWhileWriting(after=250),
        )

    with pytest.raises(ndjson.ImportInterrupted) as caught:
        await asyncio.create_task(interrupted())
    assert str(caught.value).startswith("lines 1-200 were committed")
    assert [r.line for r in told] == [11, 121]


class _CancelAtStatistics(_CancelWhileWriting):
    """Cancels the import's task when the statistics phase begins (the write committed)."""

    def phase(self, label: str, total: int | None) -> None:
        if label.startswith("search statistics") and self.task is not None:
            self.task.cancel()


async def test_an_import_interrupted_after_its_write_counts_the_refused_lines(engine):
    """Interrupted in the statistics phase, a skip import said "every line was written" though
    lines had been refused. It says how many were refused, each told once; the pair: with
    none refused, every line."""
    for refused_one in (True, False):
        t = await Team().load(engine)
        recs = notes(t, 1100, "st")
        if refused_one:
            recs[7] = {**recs[7], "type": "passage"}
        told: list[ndjson.Refusal] = []

        async def interrupted(
            records: list[dict[str, Any]] = recs, out: list[ndjson.Refusal] = told
        ) -> None:
            await ndjson.import_records(
                engine,
                ndjson.from_dicts(records),
                on_error="skip",
                on_refused=out.append,
                progress=_CancelAtStatistics(after=10**9),
            )

        with pytest.raises(ndjson.ImportInterrupted) as caught:
            await asyncio.create_task(interrupted())
        said = str(caught.value)
        if refused_one:
            assert said.startswith("every line but the 1 refused ones (listed in the reject")
            assert await count(engine, t, "st") == 1099
            assert [r.line for r in told] == [8]
        else:
            assert said.startswith("every line was written, but the search statistics")
            assert await count(engine, t, "st") == 1100


def _with_malformed(recs: list[dict[str, Any]], before: dict[int, str]) -> str:
    """``recs`` as NDJSON, with the raw line ``before[i]`` placed before record ``i``."""
    return "".join(before.get(i, "") + json.dumps(r) + "\n" for i, r in enumerate(recs))


@pytest.mark.parametrize("atomic", [True, False])
async def test_an_interrupted_skip_import_lists_every_line_refused_so_far(engine, tmp_path, atomic):
    """Ctrl-C during a skip import's write lost the lines refused while reading (not JSON)
    beyond the last committed batch: all of them in an all-or-nothing import, where nothing
    commits. Every line refused so far is told: those refused while reading, and those of the
    committed batches; a line of the batch being written is neither written nor told."""
    t = await Team().load(engine)
    recs = notes(t, 300, "rf")
    for i in (10, 120, 260):  # a refused rule in batch 1, 2 (committed) and 3 (interrupted)
        recs[i] = {**recs[i], "type": "passage"}
    path = tmp_path / "rf.ndjson"
    path.write_text(_with_malformed(recs, {0: "{\n", 150: "[1]\n", 280: "not json\n"}))
    told: list[ndjson.Refusal] = []

    async def interrupted() -> None:
        await ndjson.import_records(
            engine,
            ndjson.read_file(path, lenient=True),
            batch_size=100,
            atomic=atomic,
            on_error="skip",
            on_refused=told.append,
            progress=_CancelWhileWriting(after=150 if atomic else 250),
        )

    with pytest.raises(ndjson.ImportInterrupted) as caught:
        await asyncio.create_task(interrupted())
    malformed = [1, 152, 283]  # each shifts the lines after it by one
    if atomic:
        assert str(caught.value) == "nothing of the file was written"
        assert [(r.line, r.rule) for r in told] == [(n, "malformed") for n in malformed]
        assert await count(engine, t, "rf") == 0
    else:
        assert str(caught.value).startswith("lines 1-202 were committed")
        assert [r.line for r in told] == [1, 12, 122, 152, 283]
        assert await count(engine, t, "rf") == 198
    assert len({r.line for r in told}) == len(told)


_LOADING = """\
import runpy, sys, time


class HoldAtTyper:
    '''Holds the command while its modules load (at typer's import) until Ctrl-C.'''

    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            print("loading", file=sys.stderr, flush=True)
            time.sleep(600)
        return None


sys.meta_path.insert(0, HoldAtTyper())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _ctrl_c_as_at_a_terminal() -> None:
    """In the child before it runs: SIGINT's default action, as a command started at a terminal
    has it. A suite started in the background by a shell without job control (``cmd &``, as CI
    runners may start it) passes SIGINT on ignored, and Python then installs no handler: the
    test's Ctrl-C would be lost and the child never end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _checkout_env(database_url: str) -> dict[str, str]:
    """The environment of a command run from this checkout: its ``app`` package first (the
    editable install may point at another checkout's)."""
    return {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(PROJECT_ROOT)}


def test_ctrl_c_while_the_command_loads_is_one_line_not_a_traceback(database_url, tmp_path):
    """Ctrl-C in the first half second of ``sibyl-pg import`` (its modules loading, before the
    command's own handler runs) printed a ``KeyboardInterrupt`` traceback and the process died
    of the signal. It says it was interrupted, exit 130; the pair: loaded, it imports."""
    path = tmp_path / "in.ndjson"
    path.write_text('{"kind": "org", "id": "org_loading", "name": "O"}\n')
    held = subprocess.Popen(
        [sys.executable, "-c", _LOADING, SIBYL, "import", str(path)],
        env=_checkout_env(database_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    assert held.stderr is not None
    assert held.stderr.readline() == "loading\n"  # it waits there until the signal
    held.send_signal(signal.SIGINT)
    _, stderr = held.communicate(timeout=120)
    assert (held.returncode, stderr) == (130, "sibyl-pg: interrupted\n")
    done = subprocess.run(
        [SIBYL, "import", str(path)],
        env=_checkout_env(database_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "org: 0 unchanged, 1 written" in done.stdout, done.stderr


async def test_ctrl_c_during_a_skip_import_keeps_every_refused_line_in_the_reject_file(
    engine, database_url, tmp_path
):
    """Ctrl-C during ``sibyl-pg import --on-error skip --commit-batches`` left in the reject
    file only the refused lines of the committed batches: the lines refused while reading
    after them were lost, and the message did not say where the list was. Interrupted while
    a batch waits for a row lock (held here, so the signal lands mid-write however slow the
    machine), the reject file holds every line refused so far, each whole, and one line says
    what was committed and where the refused lines are, exit 130; the pair: run again
    uninterrupted, it lists every refused line."""
    t = await Team().load(engine)
    recs = notes(t, 300, "ck")  # batches 1-3, in project p1: committed
    recs += [
        {**r, "project": "p2", "owner": t.u("own")} for r in notes(t, 100, "cq")
    ]  # batch 4, in p2: it waits for the lock on p2
    for i in (10, 250, 350):
        recs[i] = {**recs[i], "type": "passage"}
    path = tmp_path / "ck.ndjson"
    path.write_text(_with_malformed(recs, {5: "{\n", 320: "[1]\n", 399: "not json\n"}))
    target = tmp_path / "ck.rejects.ndjson"
    args = [SIBYL, "import", str(path), "--on-error", "skip", "--commit-batches"]
    args += ["--batch-size", "100", "--rejects", str(target)]
    said = tmp_path / "stderr.txt"
    async with engine.begin() as conn:
        await conn.execute(
            text("SELECT 1 FROM projects WHERE org_id = :o AND id = 'p2' FOR UPDATE"),
            {"o": t.org},
        )
        with said.open("w") as stderr:
            held = subprocess.Popen(
                args,
                env=_checkout_env(database_url),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                preexec_fn=_ctrl_c_as_at_a_terminal,
            )
        try:
            async with asyncio.timeout(300):  # a bound for a hang, not a measure
                while not await scalar(
                    engine,
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE '%import.projects_found%'",
                ):
                    assert held.poll() is None, said.read_text()
                    await asyncio.sleep(0.1)
            held.send_signal(signal.SIGINT)
            await asyncio.to_thread(held.wait, 120)
        finally:
            if held.poll() is None:
                held.kill()
    stderr_text = said.read_text()
    assert held.returncode == 130 and "Traceback" not in stderr_text, stderr_text
    assert stderr_text.splitlines()[-1] == (
        "error: import interrupted: lines 1-301 were committed; nothing from line 302 on was"
        f" written; 5 lines refused so far, listed in {target}"
    )
    text_of = target.read_text()
    assert text_of.endswith("\n")
    listed = [json.loads(x) for x in text_of.splitlines()]
    assert [(r["line"], r["rule"]) for r in listed] == [
        (6, "malformed"),
        (12, "reserved type"),
        (252, "reserved type"),
        (322, "malformed"),
        (402, "malformed"),
    ]
    assert await count(engine, t, "ck") == 298
    done = subprocess.run(
        args, env=_checkout_env(database_url), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, done.stderr
    assert [json.loads(x)["line"] for x in target.read_text().splitlines()] == [
        6,
        12,
        252,
        322,
        353,
        402,
    ]
