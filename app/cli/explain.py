"""``sibyl-pg explain``: the body of the CLI command (kept apart from
the shared ``app/cli/main.py``).

Reads ``DATABASE_URL`` like every subcommand, uses the service's read statement timeout, and
prints to standard output; errors go to standard error with a non-zero exit status.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import typer
from pydantic import ValidationError

from app.core.db import database_refusal, make_engine
from app.core.errors import DomainError, Unavailable
from app.core.settings import get_settings
from app.service.explain import ExplainReport, PlanFormat, explain_for_user, render_text


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def run_explain(
    verb: str,
    body: str,
    *,
    user: str,
    fmt: str = "text",
    projects: str | None = None,
    generic: bool = False,
    psql: bool = False,
) -> None:
    """Explain one request of ``verb`` (JSON ``body``) as ``user`` and print the report."""
    if fmt not in ("text", "json"):
        raise _fail("--format must be text or json")
    plan_format: PlanFormat = "json" if fmt == "json" else "text"
    try:
        request: Any = json.loads(body)
    except json.JSONDecodeError as exc:
        raise _fail(f"the request body is not JSON: {exc}") from None
    key_projects = [p.strip() for p in projects.split(",") if p.strip()] if projects else None
    settings = get_settings()

    async def go() -> ExplainReport:
        engine = make_engine(statement_timeout_ms=settings.statement_timeout_ms)
        try:
            return await explain_for_user(
                engine,
                user,
                verb,
                request,
                key_projects=key_projects,
                fmt=plan_format,
                mode="generic" if generic else "custom",
                settings=settings,
            )
        finally:
            await engine.dispose()

    try:
        report = asyncio.run(go())
    except ValidationError as exc:
        if exc.title == "Settings":
            raise  # a bad setting (DATABASE_URL included): one line each, app.cli.main
        said = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise _fail(f"not a valid {verb} request: {said}") from None
    except Unavailable as exc:  # the database could not be used: as every other command says it
        raise _fail(database_refusal(exc.detail)) from None
    except DomainError as exc:
        raise _fail(exc.detail, 1) from None
    if psql:
        typer.echo("\n\n".join(s.psql for s in report.statements))
    elif plan_format == "json":
        typer.echo(report.model_dump_json(indent=2))
    else:
        typer.echo(render_text(report))
