"""``explain``: the exact SQL of one verb's request, its bound values and its plans (rule:
explain-what-is-sent).

The verb's own domain function runs, for real, on a connection whose statements are captured
(:mod:`app.repo.explain`); each captured statement is then explained with the same values, and
the transaction is rolled back. So what an operator sees is what the service sends, by
construction: no copy of any SQL lives here.

Verbs: ``expand`` (:func:`app.service.expand.expand_neighbors`), ``slice``
(:func:`app.domain.slice.fetch_slice`) and ``search`` (:func:`app.domain.search.search`). The
request body is the verb's own request, validated by its own model.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.errors import DomainError, NotFound
from app.core.reader import Reader
from app.core.settings import Settings, get_settings
from app.domain.permissions import ADMIN_HIDDEN, require_admin, require_read_scope
from app.repo import explain as explain_repo
from app.repo.housekeeping import count_orgs
from app.repo.readers import reader_by_key, reader_by_user
from app.service.session import FAULTS, raise_fault

PlanFormat = explain_repo.PlanFormat
PlanMode = explain_repo.PlanMode

HIDDEN = ADMIN_HIDDEN

# The documented bound on the distinct statement texts each verb may send, whatever its input
# (rule: few-statement-shapes; tests/test_statement_shapes.py holds the service to it). Every value
# is bound, so a verb's texts differ only by which of its fixed statements ran:
# expand: sibyl:expand_neighbors.seeds, sibyl:expand_neighbors (skipped when no seed resolves);
# slice: sibyl:fetch_slice.target, sibyl:fetch_slice.window (skipped for a 404 or an uncut memory);
# search (app/domain/search/pipeline.py): sibyl:search.words (the query's words and the reader's
# statistics), sibyl:search.fulltext and sibyl:search.exact (the lexical lanes),
# sibyl:search.spans (best spans: re-ranking and focus; skipped when nothing matched),
# sibyl:search.promote (skipped when nothing matched), sibyl:search.hits (skipped for an empty
# page); with the re-ranking (on by default) or the semantic lane: sibyl:search.semantic_tables
# (at most every 30 s per process while the tables are missing, once while they are there); the
# re-ranking: sibyl:search.rerank_ready, then sibyl:search.rerank when the head has vectors; the
# semantic lane: sibyl:search.semantic_coverage, sibyl:search.semantic or
# sibyl:search.semantic_ef with sibyl:search.semantic_index.
STATEMENT_SHAPES = {"expand": 2, "slice": 2, "search": 14}
SEARCH_LEXICAL_SHAPES = 6
"""Of search's shapes, those it sends where vectors cannot be used (the tables' look aside)."""


@dataclass(frozen=True)
class Verb:
    """One explainable verb: its request model and how to run it for a reader."""

    name: str
    request: type[BaseModel]
    run: Callable[[AsyncConnection, Reader, Any, Settings], Awaitable[object]]
    shapes: int


async def _run_expand(conn: AsyncConnection, reader: Reader, body: Any, s: Settings) -> object:
    from app.service.expand import expand_neighbors

    return await expand_neighbors(conn, reader, body, settings=s)


async def _run_slice(conn: AsyncConnection, reader: Reader, body: Any, s: Settings) -> object:
    from app.domain.slice import fetch_slice

    return await fetch_slice(conn, reader, body)


async def _run_search(conn: AsyncConnection, reader: Reader, body: Any, s: Settings) -> object:
    from app.domain.search import search

    return await search(conn, reader, body, settings=s)


def verbs() -> dict[str, Verb]:
    """The verbs ``explain`` knows, by the name used on the CLI and in the REST path."""
    from app.domain.schemas import ExpandRequest, SearchRequest, SliceRequest

    return {
        "expand": Verb("expand", ExpandRequest, _run_expand, STATEMENT_SHAPES["expand"]),
        "slice": Verb("slice", SliceRequest, _run_slice, STATEMENT_SHAPES["slice"]),
        "search": Verb("search", SearchRequest, _run_search, STATEMENT_SHAPES["search"]),
    }


class ExplainParameter(BaseModel):
    """One bound value: its ``$n`` position, its name in the service's code, type and value."""

    position: int = Field(description="The placeholder number: $1, $2, ...")
    name: str | None = Field(description="The bound parameter's name in the statement's source")
    type: str = Field(description="The SQL type PostgreSQL infers for the placeholder")
    value: Any = Field(description="The value the service bound")
    literal: str = Field(description="The value as a typed SQL literal (to replay it in psql)")


class ExplainStatement(BaseModel):
    """One statement the verb sent, in the order it was sent, with its plan."""

    name: str = Field(description="The constant name comment the statement starts with")
    sql: str = Field(description="The exact text sent, with $n placeholders")
    parameters: list[ExplainParameter]
    plan: Any = Field(
        description="EXPLAIN lines, or the FORMAT JSON document; null when the report's "
        "`figures` is `none`"
    )
    psql: str = Field(description="A psql script that replays the statement and its plan")


class ExplainReport(BaseModel):
    """What ``explain`` returns: every statement of one request of ``verb``, and its outcome."""

    verb: str
    format: Literal["text", "json"]
    plan_mode: Literal["custom", "generic"] = Field(
        description="custom: planned with the values (first executions); generic: the "
        "parameter-blind plan a pooled connection may switch to after five executions"
    )
    outcome: str = Field(description="'ok', or the status and message the verb answered with")
    figures: Literal["measured", "none"] = Field(
        default="measured",
        description="measured: each statement's EXPLAIN (ANALYZE, BUFFERS); none: no plan "
        "(`plan` null; over REST by default: PostgreSQL measures, estimates and chooses a "
        "plan's nodes from every org's rows; SIBYL_REST_EXPLAIN)",
    )
    statements: list[ExplainStatement]


def _statement(plan: explain_repo.StatementPlan, mode: PlanMode) -> ExplainStatement:
    stmt = plan.statement
    names = stmt.names or (None,) * len(stmt.parameters)
    return ExplainStatement(
        name=stmt.name,
        sql=stmt.sql,
        parameters=[
            ExplainParameter(position=i, name=n, type=t, value=v, literal=lit)
            for i, (n, t, v, lit) in enumerate(
                zip(names, plan.types, stmt.parameters, plan.literals, strict=True), start=1
            )
        ],
        plan=plan.plan,
        psql=explain_repo.psql_script(plan, mode=mode),
    )


async def explain(
    conn: AsyncConnection,
    reader: Reader,
    verb: Verb,
    body: Any,
    *,
    fmt: PlanFormat = "text",
    mode: PlanMode = "custom",
    settings: Settings | None = None,
    measured: bool = True,
) -> ExplainReport:
    """Run ``verb`` for ``body`` as ``reader`` on ``conn``, then explain every statement it sent
    (``measured=False``: no plan, only the statements, values and psql scripts).

    ``conn`` must be inside a transaction the caller rolls back
    (:func:`app.repo.explain.rolled_back_read`). Raises pydantic's ``ValidationError`` for a body
    of the wrong shape (422), and the verb's own ``DomainError`` when it failed before sending
    any statement (a 400); a verb that failed after sending statements (a 404) is reported in
    ``outcome`` with the plans of what it sent.
    """
    s = settings or get_settings()
    request = verb.request.model_validate(body)
    outcome = "ok"
    async with explain_repo.capture(conn) as captured:
        try:
            await verb.run(conn, reader, request, s)
        except DomainError as error:
            if not captured:
                raise
            outcome = f"{error.status} {error.detail}"
    statements = list(captured)
    plans = [
        await explain_repo.explain_statement(conn, stmt, fmt=fmt, mode=mode, planned=measured)
        for stmt in statements
    ]
    return ExplainReport(
        verb=verb.name,
        format=fmt,
        plan_mode=mode,
        outcome=outcome,
        figures="measured" if measured else "none",
        statements=[_statement(p, mode) for p in plans],
    )


def _lookup(verb: str) -> Verb:
    found = verbs().get(verb)
    if found is None:
        raise NotFound(HIDDEN)
    return found


async def _guarded(call: Awaitable[ExplainReport]) -> ExplainReport:
    try:
        return await call
    except FAULTS as error:
        raise_fault(error)


async def explain_for_key(
    engine: AsyncEngine,
    key: str | None,
    verb: str,
    body: Any,
    *,
    fmt: PlanFormat = "text",
    mode: PlanMode = "custom",
    settings: Settings | None = None,
) -> ExplainReport:
    """``explain`` for the REST admin route: the reader is ``key``'s user.

    A missing, unknown or revoked key, a key without the ``admin`` scope, a key of a user who is
    not an org owner or admin, a project-restricted key and an unknown verb all
    raise the same ``NotFound("Not found")``: the route does not exist for anyone else. An
    admin key without ``read`` gets ``Forbidden`` (403): the route runs the read verb it explains.
    Database faults (including the statement timeout) raise ``Unavailable`` (503).

    No plan unless ``SIBYL_REST_EXPLAIN=measured``: PostgreSQL counts, times and estimates a
    plan's rows over every org in the database (a full-text index holds every org's rows; a
    small table is read whole), so an org admin watching a plan would see another org's memories
    come and go (``rows=0`` becoming ``rows=37`` when another org writes 37 memories holding the
    word); and it chooses the plan's nodes from statistics of every org (plans without figures
    change their indexes when another org imports 20,000 memories). The operator's CLI always
    measures.
    """
    spec = _lookup(verb)
    s = settings or get_settings()

    async def go() -> ExplainReport:
        async with explain_repo.rolled_back_read(engine) as conn:
            # the rule of every /api/admin route: an org owner's or admin's unrestricted admin key
            reader = require_admin(await reader_by_key(conn, key=key) if key else None)
            require_read_scope(reader)  # it runs the read verb it explains
            return await explain(
                conn,
                reader,
                spec,
                body,
                fmt=fmt,
                mode=mode,
                settings=s,
                measured=await _measures(conn, s),
            )

    return await _guarded(go())


async def _measures(conn: AsyncConnection, s: Settings) -> bool:
    """Whether the REST explain shows measured plans (``SIBYL_REST_EXPLAIN``): ``measured``
    always (the operator's word that the database holds one org), ``single-org`` while it holds
    exactly one, counted now (a second org imported into a running server must not see its rows
    counted in the first org's plans), ``sql`` never."""
    if s.rest_explain == "single-org":
        return await count_orgs(conn) == 1
    return s.rest_explain == "measured"


async def explain_for_user(
    engine: AsyncEngine,
    user_id: str,
    verb: str,
    body: Any,
    *,
    key_projects: list[str] | None = None,
    fmt: PlanFormat = "text",
    mode: PlanMode = "custom",
    settings: Settings | None = None,
) -> ExplainReport:
    """``explain`` for the CLI: the reader is what a key of ``user_id`` would be (restricted to
    ``key_projects`` when given). Raises ``NotFound`` for an unknown user or verb."""
    spec = verbs().get(verb)
    if spec is None:
        raise NotFound(f"Unknown verb {verb!r}: use one of {', '.join(verbs())}")

    async def go() -> ExplainReport:
        async with explain_repo.rolled_back_read(engine) as conn:
            reader = await reader_by_user(conn, user_id=user_id, key_projects=key_projects)
            if reader is None:
                raise NotFound("User not found")
            return await explain(conn, reader, spec, body, fmt=fmt, mode=mode, settings=settings)

    return await _guarded(go())


_JSON_OPTION = {"text": "", "json": ", FORMAT JSON"}


def render_text(report: ExplainReport) -> str:
    """The report as an operator reads it in a terminal: per statement, the SQL (its name comment
    first), then its parameters, then its plan (text lines, or indented JSON)."""
    out: list[str] = [
        f"-- explain {report.verb}: {len(report.statements)} statement(s), "
        f"{report.plan_mode} plan, outcome: {report.outcome}"
    ]
    for n, stmt in enumerate(report.statements, start=1):
        out += ["", f"-- [{n}/{len(report.statements)}] {stmt.name}", stmt.sql.rstrip(), ""]
        out.append("-- parameters:")
        for p in stmt.parameters:
            value = json.dumps(p.value, default=str, ensure_ascii=False)
            out.append(f"--   ${p.position} {p.name or '?'} ({p.type}) = {value}")
        if stmt.plan is None:
            out += ["", "-- plan: not shown (SIBYL_REST_EXPLAIN; the operator's CLI shows it)"]
            continue
        out += ["", f"-- plan: EXPLAIN (ANALYZE, BUFFERS{_JSON_OPTION[report.format]})"]
        if isinstance(stmt.plan, list) and all(isinstance(line, str) for line in stmt.plan):
            out += stmt.plan
        else:
            out.append(json.dumps(stmt.plan, indent=2, default=str))
    return "\n".join(out)
