"""``sibyl-pg doctor``: the body of the CLI command (kept apart from
the shared ``app/cli/main.py``).

Reads ``DATABASE_URL`` like every subcommand (else the embedded server), prints each check of
:mod:`app.service.doctor` with what to change and why, and exits with:

- 0: every check is ok, info or warn (the service works on this server);
- 1: a check failed (not migrated to head, a missing or invalid index, a server too old);
- 2: the doctor could not ask the server (unreachable, refused).
"""

from __future__ import annotations

import asyncio

import pydantic
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from app.core.db import DATABASE_HINT, make_engine
from app.service.doctor import DoctorReport, doctor_for_operator

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2

_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}


def render(report: DoctorReport, console: Console) -> None:
    """Print ``report``: one row per check (status, then the finding and its advice below)."""
    console.print(f"sibyl-pg doctor: {escape(report.server_version)}")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for check in report.checks:
        body = Text(f"{check.name}: {check.summary}")
        if check.advice:
            body.append("\n" + check.advice, style="dim" if check.status in ("ok", "info") else "")
        grid.add_row(Text(check.status.upper(), style=_STYLE[check.status]), body)
    with console.capture() as captured:  # the grid pads every line to the full width
        console.print(grid)
    console.file.write("\n".join(line.rstrip() for line in captured.get().splitlines()) + "\n")
    counts = {s: sum(c.status == s for c in report.checks) for s in _STYLE}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    console.print(f"overall: [{_STYLE[report.status]}]{report.status}[/] ({summary})")


def run_doctor(*, as_json: bool = False) -> None:
    """Run every check against the service's database, print the report, exit as documented."""

    async def go() -> DoctorReport:
        engine = make_engine()
        try:
            return await doctor_for_operator(engine)
        finally:
            await engine.dispose()

    try:
        report = asyncio.run(go())
    except pydantic.ValidationError:
        raise  # a bad setting (DATABASE_URL included): one line each, app.cli.main
    except (OSError, ConnectionError) as exc:
        typer.echo(f"error: cannot reach the database: {exc}\n{DATABASE_HINT}", err=True)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    except Exception as exc:  # a refused login, a missing database: say so, no stack trace
        reason = getattr(exc, "orig", None) or exc  # the driver's message, not SQLAlchemy's
        typer.echo(f"error: the database refused the doctor: {reason}\n{DATABASE_HINT}", err=True)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        render(report, Console(highlight=False))
    raise typer.Exit(EXIT_FAILED if report.failed() else EXIT_OK)
