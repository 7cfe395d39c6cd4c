"""Operator commands of the directory (rules: write-permissions, command-line): ``sibyl-pg keys
list`` and ``sibyl-pg admin ...`` for orgs, users, projects, members and grants.

These run with the database's own credentials (``DATABASE_URL``), as ``keys create`` does: an
operator is trusted, so no read rule or role check applies, but every command stays inside the
org it names (a member's or grant's org is its user's org). Listings go to standard output as
tab-separated lines; confirmations go to standard error. ``keys list`` never prints a secret
(only its hash is stored).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.db import make_engine
from app.core.errors import Conflict, DomainError, NotFound
from app.domain.validation import path_id_problem
from app.repo import directory

T = TypeVar("T")

admin_cli = typer.Typer(
    help="Manage orgs, users, projects, members and grants (operators).", no_args_is_help=True
)

ORG_ROLES = ("owner", "admin", "member", "viewer")
PROJECT_ROLES = ("viewer", "contributor", "maintainer", "owner")


def _run(work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """Run ``work`` in one committed transaction; a domain error exits 1 with its message."""

    async def go() -> T:
        engine = make_engine()
        try:
            async with engine.begin() as conn:
                return await work(conn)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(go())
    except DomainError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from None


def _check_id(value: str, what: str) -> str:
    problem = path_id_problem(value)
    if problem is not None:
        raise typer.BadParameter(f"{what} {problem}")
    return value


def _choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise typer.BadParameter(f"{what} must be one of {', '.join(allowed)}")
    return value


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    for row in rows:
        typer.echo("\t".join("" if row[c] is None else str(row[c]) for c in columns))


async def _org_of_user(conn: AsyncConnection, user_id: str) -> str:
    from app.repo.keys import USER_ORG_SQL

    org = (await conn.execute(USER_ORG_SQL, {"user_id": user_id})).scalar()
    if org is None:
        raise NotFound("User not found")
    return str(org)


def keys_list(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's keys")] = None,
    org: Annotated[str | None, typer.Option("--org", help="Only this org's keys")] = None,
    live: Annotated[bool, typer.Option("--live", help="Leave out revoked keys")] = False,
) -> None:
    """List API keys: id, org, user, scopes, projects, created, revoked (never the secret)."""

    async def work(conn: AsyncConnection) -> list[directory.KeyRecord]:
        return await directory.list_keys(conn, org_id=org, user_id=user, include_revoked=not live)

    keys = _run(work)  # before the header: a database that cannot be used prints nothing
    typer.echo("id\torg\tuser\tscopes\tprojects\tcreated\trevoked\tlabel")
    for k in keys:
        typer.echo(
            "\t".join(
                [
                    k.id,
                    k.org_id,
                    k.user_id,
                    ",".join(k.scopes),
                    ",".join(k.projects) if k.projects is not None else "*",
                    k.created_at.isoformat(timespec="seconds"),
                    k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "-",
                    k.label or "",
                ]
            )
        )


@admin_cli.command("org-create")
def org_create(
    org_id: Annotated[str, typer.Argument(help="The org id")],
    name: Annotated[str, typer.Option(help="Display name")],
) -> None:
    """Create an org."""

    async def work(conn: AsyncConnection) -> None:
        if not await directory.insert_org(conn, org_id=_check_id(org_id, "org"), name=name):
            raise Conflict("An org with this id already exists")

    _run(work)
    typer.echo(f"created org {org_id}", err=True)


@admin_cli.command("org-list")
def org_list() -> None:
    """List every org: id, name."""
    _table(_run(directory.list_orgs), ["id", "name"])


@admin_cli.command("user-create")
def user_create(
    user_id: Annotated[str, typer.Argument(help="The user id (unique across orgs)")],
    org: Annotated[str, typer.Option("--org", help="The user's org")],
    handle: Annotated[str, typer.Option(help="Display handle")],
    role: Annotated[str, typer.Option(help="owner | admin | member | viewer")] = "member",
) -> None:
    """Create a user in an org."""

    async def work(conn: AsyncConnection) -> None:
        row = await directory.insert_user(
            conn,
            org_id=org,
            user_id=_check_id(user_id, "user"),
            handle=handle,
            role=_choice(role, ORG_ROLES, "role"),
        )
        if row is None:
            raise Conflict("A user with this id already exists")

    _run(work)
    typer.echo(f"created user {user_id} in {org}", err=True)


@admin_cli.command("user-role")
def user_role(
    user_id: Annotated[str, typer.Argument(help="The user id")],
    role: Annotated[str, typer.Argument(help="owner | admin | member | viewer")],
) -> None:
    """Change a user's org role."""

    async def work(conn: AsyncConnection) -> None:
        org = await _org_of_user(conn, user_id)
        await directory.update_user(
            conn, org_id=org, user_id=user_id, handle=None, role=_choice(role, ORG_ROLES, "role")
        )

    _run(work)
    typer.echo(f"{user_id} is now {role}", err=True)


@admin_cli.command("user-list")
def user_list(org: Annotated[str, typer.Option("--org", help="The org")]) -> None:
    """List the users of an org: id, handle, role."""

    async def work(conn: AsyncConnection) -> list[dict[str, Any]]:
        return await directory.list_users(conn, org_id=org)

    _table(_run(work), ["id", "handle", "role"])


@admin_cli.command("project-create")
def project_create(
    project_id: Annotated[str, typer.Argument(help="The project id (unique in its org)")],
    org: Annotated[str, typer.Option("--org", help="The project's org")],
    name: Annotated[str, typer.Option(help="Display name")],
    visibility: Annotated[str, typer.Option(help="private | org")] = "private",
) -> None:
    """Create a project."""

    async def work(conn: AsyncConnection) -> None:
        row = await directory.insert_project(
            conn,
            org_id=org,
            project_id=_check_id(project_id, "project"),
            name=name,
            visibility=_choice(visibility, ("private", "org"), "visibility"),
        )
        if row is None:
            raise Conflict("A project with this id already exists in the org")

    _run(work)
    typer.echo(f"created project {project_id} in {org}", err=True)


@admin_cli.command("project-list")
def project_list(org: Annotated[str, typer.Option("--org", help="The org")]) -> None:
    """List the projects of an org: id, name, visibility."""

    async def work(conn: AsyncConnection) -> list[dict[str, Any]]:
        return await directory.list_projects(conn, org_id=org)

    _table(_run(work), ["id", "name", "visibility"])


@admin_cli.command("member-set")
def member_set(
    project_id: Annotated[str, typer.Argument(help="The project id")],
    user_id: Annotated[str, typer.Argument(help="The user id (its org is the project's)")],
    role: Annotated[str, typer.Argument(help="viewer | contributor | maintainer | owner")],
) -> None:
    """Add a user to a project of their org, or change their role there."""

    async def work(conn: AsyncConnection) -> None:
        org = await _org_of_user(conn, user_id)
        if not await directory.project_exists(conn, org_id=org, project_id=project_id):
            raise NotFound("Project not found in the user's org")
        await directory.upsert_member(
            conn,
            org_id=org,
            project_id=project_id,
            user_id=user_id,
            role=_choice(role, PROJECT_ROLES, "role"),
        )

    _run(work)
    typer.echo(f"{user_id} is {role} of {project_id}", err=True)


@admin_cli.command("member-remove")
def member_remove(
    project_id: Annotated[str, typer.Argument(help="The project id")],
    user_id: Annotated[str, typer.Argument(help="The user id")],
) -> None:
    """Remove a user from a project."""

    async def work(conn: AsyncConnection) -> None:
        org = await _org_of_user(conn, user_id)
        if not await directory.delete_member(
            conn, org_id=org, project_id=project_id, user_id=user_id
        ):
            raise NotFound("Member not found")

    _run(work)
    typer.echo(f"removed {user_id} from {project_id}", err=True)


@admin_cli.command("member-list")
def member_list(
    project_id: Annotated[str, typer.Argument(help="The project id")],
    org: Annotated[str, typer.Option("--org", help="The project's org")],
) -> None:
    """List the members of a project: user, role."""

    async def work(conn: AsyncConnection) -> list[dict[str, Any]]:
        return await directory.list_members(conn, org_id=org, project_id=project_id)

    _table(_run(work), ["user_id", "role"])


@admin_cli.command("grant")
def grant(
    entity_id: Annotated[str, typer.Argument(help="The memory id")],
    user_id: Annotated[str, typer.Argument(help="The user who may read it (same org)")],
    revoke: Annotated[bool, typer.Option("--revoke", help="Remove the grant instead")] = False,
) -> None:
    """Grant (or, with --revoke, remove) a user's read access to a private memory."""

    async def work(conn: AsyncConnection) -> None:
        org = await _org_of_user(conn, user_id)
        if revoke:
            if not await directory.delete_grant(
                conn, org_id=org, entity_id=entity_id, user_id=user_id
            ):
                raise NotFound("Grant not found")
            return
        from app.repo.writes import existing_ids

        if not await existing_ids(conn, org_id=org, ids=[entity_id]):
            raise NotFound("Entity not found in the user's org")
        await directory.insert_grant(conn, org_id=org, entity_id=entity_id, user_id=user_id)

    _run(work)
    typer.echo(f"{'revoked' if revoke else 'granted'} {user_id} on {entity_id}", err=True)


@admin_cli.command("grant-list")
def grant_list(
    entity_id: Annotated[str, typer.Argument(help="The memory id")],
    org: Annotated[str, typer.Option("--org", help="The memory's org")],
) -> None:
    """List the users a memory is granted to."""

    async def work(conn: AsyncConnection) -> list[dict[str, Any]]:
        return await directory.list_grants(conn, org_id=org, entity_id=entity_id)

    _table(_run(work), ["user_id"])


def register(cli: typer.Typer, keys_cli: typer.Typer) -> None:
    """Attach ``keys list`` and the ``admin`` group to the ``sibyl-pg`` command line."""
    keys_cli.command("list")(keys_list)
    cli.add_typer(admin_cli, name="admin")
