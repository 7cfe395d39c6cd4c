"""NDJSON bulk import (§9): idempotent, batched, bad lines reported, nothing half-written."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from app.importers import ndjson

SIBYL = str(Path(sys.executable).with_name("sibyl-pg"))


def sample(org: str, sfx: str) -> list[dict]:
    user = f"user_ann_{sfx}"
    long_body = "\n\n".join(f"# Part {i}\n\n" + "lorem ipsum dolor " * 60 for i in range(4))
    return [
        {"kind": "org", "id": org, "name": "Python"},
        {"kind": "user", "id": user, "org": org, "handle": "ann", "role": "member"},
        {
            "kind": "project",
            "id": "proj_typing",
            "org": org,
            "name": "Typing",
            "visibility": "private",
        },
        {"kind": "member", "project": "proj_typing", "user": user, "role": "contributor"},
        {
            "kind": "entity",
            "id": "pep_0484",
            "org": org,
            "type": "decision",
            "name": "PEP 484",
            "content": long_body,
            "project": "proj_typing",
            "owner": user,
            "metadata": {"n": 484},
        },
        {
            "kind": "entity",
            "id": "pep_0526",
            "org": org,
            "type": "decision",
            "name": "PEP 526",
            "content": "Builds on [[pep_0484]] and [[nope]].",
            "project": "proj_typing",
            "scope": "project",
            "owner": user,
        },
        {
            "kind": "entity",
            "id": "pep_0999",
            "org": org,
            "type": "note",
            "name": "Draft",
            "content": "secret",
            "owner": user,
        },
        {
            "kind": "edge",
            "org": org,
            "src": "pep_0526",
            "dst": "pep_0484",
            "relationship": "depends_on",
        },
        {"kind": "mention", "org": org, "src": "pep_0484", "dst": "pep_0526"},
        {"kind": "grant", "entity": "pep_0999", "user": user},
    ]


async def counts(engine, org: str) -> dict[str, object]:
    out: dict[str, object] = {}
    async with engine.connect() as conn:
        for table in (
            "entities",
            "passages",
            "edges",
            "mentions",
            "entity_grants",
            "project_members",
        ):
            n = await conn.execute(
                text(f"SELECT count(*) FROM {table} WHERE org_id = :o"), {"o": org}
            )
            out[table] = n.scalar_one()
        rev = await conn.execute(
            text("SELECT max(revision), max(updated_at)::text FROM entities WHERE org_id = :o"),
            {"o": org},
        )
        out["state"] = tuple(rev.one())
    return out


def write(tmp_path: Path, records: list[dict], extra: str = "") -> Path:
    path = tmp_path / "in.ndjson"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n" + extra)
    return path


async def test_import_cuts_derives_and_is_idempotent(engine, tmp_path):
    org, sfx = "org_imp_" + secrets.token_hex(3), secrets.token_hex(3)
    path = write(tmp_path, sample(org, sfx))
    first = await ndjson.import_records(engine, ndjson.read_file(path))
    assert first.outcomes["entity:created"] == 3
    assert first.relationships == {"DEPENDS_ON": 1}
    after_first = await counts(engine, org)
    assert after_first["passages"] >= 2  # the long body was cut on import
    # [[pep_0484]] became a derived mention; [[nope]] does not exist: kept pending, reported
    assert after_first["mentions"] == 2
    assert first.pending_links == 1 and "pending links: 1" in first.render()
    assert after_first["edges"] == 1 and after_first["entity_grants"] == 1
    second = await ndjson.import_records(engine, ndjson.read_file(path))
    assert second.outcomes["entity:unchanged"] == 3
    assert second.outcomes["edge:unchanged"] == 1
    assert await counts(engine, org) == after_first  # a repeated import changes nothing


async def test_a_streamed_import_writes_what_a_whole_file_import_writes(engine):
    """Records written as they come (windows of two lines, one transaction: the PEP import's
    way) store the same rows and report the same outcomes as the whole input read first;
    the pending link to a memory of a later window is resolved as it would be in one batch."""
    results = {}
    for streamed in (False, True):
        org, sfx = "org_str_" + secrets.token_hex(3), secrets.token_hex(3)
        records = sample(org, sfx)
        summary = await ndjson.import_records(
            engine, ndjson.from_dicts(records), batch_size=2, streamed=streamed
        )
        results[streamed] = (
            summary.lines,
            dict(summary.outcomes),
            dict(summary.relationships),
            summary.pending_links,
            {k: v for k, v in (await counts(engine, org)).items() if k != "state"},
        )
    assert results[True] == results[False]
    assert results[True][4]["mentions"] == 2 and results[True][3] == 1


async def test_a_role_that_may_not_skip_row_checks_imports_the_same(engine, monkeypatch):
    """Where the database role may not set ``session_replication_role`` (no superuser), the
    import leaves the foreign-key checks to PostgreSQL, row by row, their plans kept: the same
    rows and outcomes as a role that skips them, and a missing reference still named."""
    from app.repo import bulk as bulk_repo

    results = {}
    for can_skip in (True, False):

        async def may_skip(conn, can_skip: bool = can_skip) -> bool:
            return can_skip

        monkeypatch.setattr(bulk_repo, "may_skip_row_checks", may_skip)
        org, sfx = "org_rc_" + secrets.token_hex(3), secrets.token_hex(3)
        summary = await ndjson.import_records(engine, ndjson.from_dicts(sample(org, sfx)))
        stored = {k: v for k, v in (await counts(engine, org)).items() if k != "state"}
        results[can_skip] = (dict(summary.outcomes), dict(summary.relationships), stored)
        missing = {
            "kind": "edge",
            "org": org,
            "src": "pep_0484",
            "dst": "nope",
            "relationship": "x",
        }
        broken = [*sample(org, sfx)[:4], missing]
        with pytest.raises(ndjson.ImportError_, match="line 5") as refused:
            await ndjson.import_records(engine, ndjson.from_dicts(broken))
        assert "nope" in refused.value.reason
    assert results[False] == results[True]


async def test_a_streamed_import_refuses_a_repeated_key_and_writes_nothing(engine):
    org, sfx = "org_rep_" + secrets.token_hex(3), secrets.token_hex(3)
    records = sample(org, sfx)
    again = dict(records[4], name="PEP 484 again")  # pep_0484 a second time, line 11
    with pytest.raises(ValueError, match="line 11 repeats the key of line 5"):
        await ndjson.import_records(
            engine, ndjson.from_dicts([*records, again]), batch_size=2, streamed=True
        )
    assert (await counts(engine, org))["entities"] == 0  # one transaction: nothing stays
    with pytest.raises(ValueError, match="one transaction"):
        await ndjson.import_records(engine, ndjson.from_dicts(records), streamed=True, atomic=False)


async def test_bad_line_names_its_id_and_nothing_of_the_file_is_written(engine, tmp_path):
    org, sfx = "org_bad_" + secrets.token_hex(3), secrets.token_hex(3)
    records = sample(org, sfx)
    records.insert(
        7,
        {
            "kind": "edge",
            "org": org,
            "src": "pep_0526",
            "dst": "pep_4242",
            "relationship": "DEPENDS_ON",
        },
    )
    path = write(tmp_path, records)
    with pytest.raises(ndjson.ImportError_) as err:
        await ndjson.import_records(engine, ndjson.read_file(path), batch_size=2)
    assert err.value.line == 8
    assert err.value.reason == f"edge dst 'pep_4242' does not exist in org '{org}'"
    assert err.value.committed is None and err.value.outcome() == "nothing of the file was written"
    # all or nothing per file: batches 1-3 (lines 1-6) were rolled back with the bad one
    got = await counts(engine, org)
    assert {k: n for k, n in got.items() if k != "state"} == dict.fromkeys(
        got.keys() - {"state"}, 0
    )
    # a re-run after fixing the line completes the import
    del records[7]
    fixed = await ndjson.import_records(engine, ndjson.read_file(write(tmp_path, records)))
    assert fixed.outcomes["entity:created"] == 3


async def test_commit_batches_says_exactly_which_lines_were_committed(engine, tmp_path):
    org, sfx = "org_bat_" + secrets.token_hex(3), secrets.token_hex(3)
    records = sample(org, sfx)
    bad = {"kind": "edge", "org": org, "src": "pep_0526", "dst": "pep_4242", "relationship": "X"}
    records.insert(6, bad)
    path = write(tmp_path, records)
    with pytest.raises(ndjson.ImportError_) as err:
        await ndjson.import_records(engine, ndjson.read_file(path), batch_size=2, atomic=False)
    assert (err.value.line, err.value.committed) == (7, 6)
    assert err.value.outcome() == ("lines 1-6 were committed; nothing from line 7 on was written")
    assert "pep_4242" in str(err.value) and "line 7" in str(err.value)
    del records[6]
    again = await ndjson.import_records(engine, ndjson.read_file(write(tmp_path, records)))
    assert again.outcomes["entity:created"] + again.outcomes["entity:unchanged"] == 3


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"kind": "entity", "id": "bad id!", "org": "o", "type": "note", "name": "n"}', "id"),
        ('{"kind": "spaceship", "id": "x"}', "kind"),
        (
            '{"kind": "edge", "org": "o", "src": "a", "dst": "b", "relationship": "NO-DASH"}',
            "relationship",
        ),
        # a NUL is refused as REST refuses it, naming its field (was: "the database refused")
        (
            '{"kind": "entity", "id": "e", "org": "o", "type": "note", "name": "n",'
            ' "content": "a\\u0000b"}',
            "entity.content: text must be valid UTF-8 without NUL characters",
        ),
        (
            '{"kind": "entity", "id": "e", "org": "o", "type": "note", "name": "n",'
            ' "metadata": {"k": ["\\u0000"]}}',
            "entity.metadata.k: text must be valid UTF-8 without NUL characters",
        ),
        # a name that is not one line of printable text is refused by REST's rule, with REST's
        # message: tests/test_import_inputs.py::test_a_name_is_stored_as_rest_stores_it
    ],
)
def test_malformed_lines_name_their_line(line, reason):
    with pytest.raises(ndjson.ImportError_) as err:
        ndjson.parse_line(12, line)
    assert err.value.line == 12 and reason in str(err.value)


async def test_rule_violations_are_400_style_reasons(engine, tmp_path):
    org, sfx = "org_rules_" + secrets.token_hex(3), secrets.token_hex(3)
    base = sample(org, sfx)[:4]
    for bad, reason in [
        (
            {
                "kind": "entity",
                "id": "x",
                "org": org,
                "type": "note",
                "name": "x",
                "scope": "org",
                "project": "proj_typing",
            },
            "org-scoped",
        ),
        (
            {
                "kind": "entity",
                "id": "passage_x",
                "org": org,
                "type": "note",
                "name": "x",
                "owner": f"user_ann_{sfx}",
            },
            "passage_",
        ),
        ({"kind": "entity", "id": "x", "org": org, "type": "note", "name": "x"}, "owner"),
        ({"kind": "edge", "org": org, "src": "a", "dst": "a", "relationship": "BLOCKS"}, "own"),
        (
            {
                "kind": "edge",
                "org": org,
                "src": "a",
                "dst": "b",
                "relationship": "shares_community",
            },
            "synthetic",
        ),
        (
            {
                "kind": "entity",
                "id": "d",
                "org": org,
                "type": "note",
                "name": "d",
                "content": "abc",
                "owner": f"user_ann_{sfx}",
                "spans": [{"start": 0, "end": 2, "label": "x"}],
            },
            "span",
        ),
    ]:
        path = write(tmp_path, [*base, bad])
        with pytest.raises(ndjson.ImportError_) as err:
            await ndjson.import_records(engine, ndjson.read_file(path))
        assert err.value.line == 5 and reason in err.value.reason, err.value.reason


def test_cli_import_and_keys_create(database_url, tmp_path):
    org, sfx = "org_cli_" + secrets.token_hex(3), secrets.token_hex(3)
    path = write(tmp_path, sample(org, sfx), extra="\n")
    env = {**os.environ, "DATABASE_URL": database_url}
    done = subprocess.run(
        [SIBYL, "import", str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "entity: 3 created" in done.stdout and "1 DEPENDS_ON" in done.stdout
    key = subprocess.run(
        [SIBYL, "keys", "create", "--user", f"user_ann_{sfx}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert key.returncode == 0, key.stderr
    assert key.stdout.count("\n") == 1 and key.stdout.startswith("sibyl_")
    bad = write(tmp_path, [{"kind": "org", "id": org}])
    failed = subprocess.run(
        [SIBYL, "import", str(bad)], env=env, capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 1 and "line 1" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_cli_import_names_a_line_that_is_not_utf8(database_url, tmp_path):
    path = tmp_path / "latin1.ndjson"
    path.write_bytes(b'{"kind": "org", "id": "o_utf8", "name": "O"}\n{"name": "caf\xe9"}\n')
    env = {**os.environ, "DATABASE_URL": database_url}
    failed = subprocess.run(
        [SIBYL, "import", str(path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert "line 2: not valid UTF-8" in failed.stderr


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (
            {"kind": "edge", "src": "nowhere", "dst": "pep_0484", "relationship": "X"},
            "edge src 'nowhere' does not exist in org '{org}'",
        ),
        (
            {"kind": "mention", "src": "pep_0484", "dst": "gone"},
            "mention dst 'gone' does not exist in org '{org}'",
        ),
        (
            {"kind": "entity", "id": "e1", "type": "note", "name": "n", "owner": "user_zz"},
            "user 'user_zz' does not exist in org '{org}'",
        ),
        (
            {"kind": "entity", "id": "e2", "type": "note", "name": "n", "project": "proj_zz"},
            "project 'proj_zz' does not exist in org '{org}'",
        ),
        (
            {"kind": "entity", "id": "e3", "type": "passage", "name": "n", "owner": "{user}"},
            "type 'passage' is reserved for the spans the service cuts",
        ),
        (
            {"kind": "member", "project": "proj_typing", "user": "user_zz", "role": "viewer"},
            "project 'proj_typing' or user 'user_zz' does not exist, "
            "or they belong to different orgs",
        ),
        (
            {"kind": "grant", "entity": "nothing", "user": "{user}"},
            "entity 'nothing' or user '{user}' does not exist, or they belong to different orgs",
        ),
    ],
)
async def test_every_error_names_its_line_and_the_offending_id(engine, tmp_path, bad, reason):
    org, sfx = "org_err_" + secrets.token_hex(3), secrets.token_hex(3)
    user = f"user_ann_{sfx}"
    records = sample(org, sfx)
    line = {k: (v.format(user=user) if isinstance(v, str) else v) for k, v in bad.items()}
    if line["kind"] in ("edge", "mention", "entity"):
        line["org"] = org
    records.insert(5, line)  # after pep_0484, before the rest
    with pytest.raises(ndjson.ImportError_) as err:
        await ndjson.import_records(engine, ndjson.read_file(write(tmp_path, records)))
    assert err.value.line == 6
    assert err.value.reason == reason.format(org=org, user=user)
    assert str(err.value).startswith("line 6: ")


async def test_an_entity_in_an_unknown_org_names_the_org(engine, tmp_path):
    rec = {"kind": "entity", "org": "org_nowhere", "id": "x", "type": "note", "name": "n"}
    rec["scope"] = "org"
    with pytest.raises(ndjson.ImportError_) as err:
        await ndjson.import_records(engine, ndjson.read_file(write(tmp_path, [rec])))
    assert (err.value.line, err.value.reason) == (1, "org 'org_nowhere' does not exist")


async def test_an_import_refuses_metadata_the_api_refuses(engine, tmp_path):
    """The importer's records take metadata through the API's rule (finite numbers, at most 64
    levels): a deeper one is refused on its line and nothing of the file is written."""
    org, sfx = "org_meta_" + secrets.token_hex(3), secrets.token_hex(3)
    records = sample(org, sfx)
    deep: dict = {}
    for _ in range(100):
        deep = {"a": deep}
    records.insert(
        5,
        {"kind": "entity", "org": org, "id": "deep", "type": "note", "name": "n", "metadata": deep},
    )
    with pytest.raises(ndjson.ImportError_) as err:
        await ndjson.import_records(engine, ndjson.read_file(write(tmp_path, records)))
    assert err.value.line == 6 and "nesting deeper than 64" in str(err.value)
    assert "entity.metadata of 'deep':" in str(err.value)  # the line's id, as every error
    async with engine.connect() as conn:
        n = await conn.execute(text("SELECT count(*) FROM entities WHERE org_id = :o"), {"o": org})
        assert n.scalar_one() == 0


def test_a_line_nested_beyond_the_json_reader_is_one_error_not_a_traceback(tmp_path):
    """A line nested ~1,000 levels deep made ``sibyl-pg import`` print a RecursionError
    traceback (a breaker trial); it is the line's error like any other unreadable JSON."""
    line = '{"kind": "entity", "id": "d", "metadata": {"k": ' + "[" * 5000 + "]" * 5000 + "}}"
    path = tmp_path / "deep.ndjson"
    path.write_text(line + "\n")
    with pytest.raises(ndjson.ImportError_) as err:
        list(ndjson.read_file(path))
    assert err.value.line == 1 and "not valid JSON" in str(err.value)


def test_a_line_with_an_integer_too_long_to_read_is_one_error(tmp_path):
    line = '{"kind": "entity", "id": "n", "metadata": {"n": ' + "9" * 5000 + "}}"
    path = tmp_path / "long.ndjson"
    path.write_text(line + "\n")
    with pytest.raises(ndjson.ImportError_) as err:
        list(ndjson.read_file(path))
    assert err.value.line == 1 and "not valid JSON" in str(err.value)


@pytest.mark.parametrize("kind", ["entity", "project"])
async def test_an_import_refuses_a_dot_segment_id(engine, tmp_path, kind):
    """``..`` matches the id pattern but no URL path names it: its line is refused, nothing of
    the file is written (REST refuses it too)."""
    org, sfx = "org_dots_" + secrets.token_hex(3), secrets.token_hex(3)
    records = sample(org, sfx)
    bad = (
        {"kind": "entity", "org": org, "id": "..", "type": "note", "name": "n"}
        if kind == "entity"
        else {"kind": "project", "id": "..", "org": org, "name": "Dots", "visibility": "org"}
    )
    records.insert(5, bad)
    with pytest.raises(ndjson.ImportError_) as err:
        await ndjson.import_records(engine, ndjson.read_file(write(tmp_path, records)))
    assert err.value.line == 6 and "cannot be '.' or '..'" in str(err.value)
    async with engine.connect() as conn:
        n = await conn.execute(text("SELECT count(*) FROM entities WHERE org_id = :o"), {"o": org})
        assert n.scalar_one() == 0
