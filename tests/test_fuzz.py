"""Fuzzing the API (issue 9): schema-driven, from the service's own OpenAPI, in process.

`schemathesis <https://schemathesis.readthedocs.io>`_ generates requests for every operation of
``create_app().openapi()`` (valid and invalid bodies, paths and query strings), sends them to the
app in process (ASGI) with a valid key of an org of its own (scopes read, write and admin, the
org's owner: every route is reachable) and with an invalid key, and checks every answer: never a
5xx, and status, content type, headers and body as documented. Examples are bounded
(:data:`EXAMPLES` per operation and mode) so the module runs in well under a minute.

The hand-written hostile values are in ``tests/test_hostile_input.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from app.api.app import create_app
from tests.builders import import_dicts, make_key

EXAMPLES = {"valid": 12, "invalid": 3}
"""Examples per operation and mode: every answer to an invalid key is the same 401, so a few
show it; a valid key reaches the verbs, where the inputs matter."""
# A request the schema allows may still be malformed by the contract's rules, which JSON Schema
# does not state (a blank id, an empty seed list, a name outside [A-Za-z0-9_]): that is a 400
# with the reason (contract §5, §6, §9), so 400 is an expected answer to schema-valid data too;
# 412 answers an If-Match the fuzzer made up. 5xx is never expected (``not_a_server_error``).
POSITIVE_STATUSES = frozenset({400, 401, 403, 404, 409, 412})


def fuzz_records(org: str, user: str) -> list[dict[str, Any]]:
    """An org owned by ``user``, with a project and a few memories the fuzzer may hit."""
    out: list[dict[str, Any]] = [
        {"kind": "org", "id": org, "name": "Fuzz"},
        {"kind": "user", "id": user, "org": org, "handle": "fuzz", "role": "owner"},
        {"kind": "project", "id": "proj", "org": org, "name": "P", "visibility": "org"},
        {"kind": "member", "project": "proj", "user": user, "role": "owner"},
    ]
    for i in range(3):
        out.append(
            {
                "kind": "entity",
                "id": f"e{i}",
                "org": org,
                "type": "note",
                "name": f"Note {i}",
                "content": "\n\n".join(f"# H{j}\n\n" + "text " * 200 for j in range(3)),
                "project": "proj",
                "owner": user,
            }
        )
    out.append({"kind": "edge", "org": org, "src": "e0", "dst": "e1", "relationship": "BLOCKS"})
    return out


@pytest.fixture(scope="module")
async def fuzz_keys(engine: Any) -> dict[str, str]:
    """A valid full-scope key of the fuzz org's owner, and a key that does not exist."""
    org = "org_fuzz_" + secrets.token_hex(4)
    user = f"user_{org}"
    await import_dicts(engine, fuzz_records(org, user))
    valid = await make_key(engine, user, scopes=("read", "write", "admin"))
    return {"valid": valid, "invalid": "sibyl_" + secrets.token_hex(6) + "_not_a_key"}


@pytest.fixture
def fuzz_schema(database_url: str) -> Iterator[Any]:
    """The app's own OpenAPI, loaded through a fresh app (ASGI, its own engine and lifespan on
    the test database); the app's lifespan is shut down after the test (schemathesis' pytest
    plugin also ends every ASGI lifespan at each test's teardown, hence one app per test)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())
    yield schema
    asgi.shutdown_lifespans()


FUZZ_SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)


def _integral_floats_only(case: Any, response: Any) -> bool:
    """True when a 422 only refuses JSON numbers like ``5.0`` for integer fields: JSON Schema
    calls them integers, the service's models are strict (``StrictInt``) on purpose, on REST
    and MCP alike, and say so with a 422 (contract §5: a value of the wrong JSON type)."""
    try:
        errors = response.json()["errors"]
    except (ValueError, KeyError, TypeError):
        return False
    body = case.body if isinstance(case.body, dict) else {}
    for error in errors:
        loc = error.get("loc", [])
        value = body.get(loc[1]) if len(loc) == 2 and loc[0] == "body" else None
        if not (error.get("type") == "int_type" and isinstance(value, float)):
            return False
        if not value.is_integer():
            return False
    return bool(errors)


def accepts_schema_valid_data(ctx: Any, response: Any, case: Any) -> None:
    """``positive_data_acceptance`` with the contract's statuses (:data:`POSITIVE_STATUSES`) and
    the one documented strictness (:func:`_integral_floats_only`)."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    status = response.status_code
    if 200 <= status < 300 or status in POSITIVE_STATUSES:
        return
    if status == 422 and _integral_floats_only(case, response):
        return
    if status == 422 and case.operation.path == "/api/admin/explain/{verb}":
        return  # the body is the verb's own request (any JSON in the schema): validated there
    raise AssertionError(
        f"{case.operation.label}: schema-valid data refused with {status}: {response.text[:300]}"
    )


def fuzz_one(
    operation: Any, mode: GenerationMode, headers: dict[str, str], examples: int
) -> str | None:
    """Fuzz one operation in one mode; the failure report, or None."""
    excluded: list[schemathesis.CheckFunction] = [positive_data_acceptance]
    if operation.path.startswith("/api/admin/"):
        # Admin routes answer 404 to a request without an admin key, as if they did not exist
        # (never 401/403): tests/test_keys.py checks that instead.
        excluded.append(ignored_auth)

    # The key is a fixed header of every case, never one of the values the fuzzer mutates.
    @given(case=operation.as_strategy(generation_mode=mode, headers=headers))
    @settings(FUZZ_SETTINGS, max_examples=examples)
    def run(case: Any) -> None:
        case.call_and_validate(
            excluded_checks=excluded, additional_checks=[accepts_schema_valid_data]
        )

    try:
        run()
    except (Exception, BaseExceptionGroup) as error:  # report them all at the end
        return f"{operation.label} [{mode.value}]: {error}"
    return None


def _can_be_malformed(operation: Any) -> bool:
    """True when the operation takes a body or a query parameter. Any string is a valid path
    parameter (the only other input), so there is no schema-violating request to make."""
    raw = operation.definition.raw
    query = [p for p in raw.get("parameters", []) if p.get("in") == "query"]
    return bool(query or raw.get("requestBody"))


def fuzz(schema: Any, key: str, examples: int) -> list[str]:
    """Run every operation of ``schema`` on valid and invalid inputs as ``key``; return one
    report per operation and mode whose checks failed (empty: all good)."""
    headers = {"Authorization": f"Bearer {key}"}
    reports = [
        fuzz_one(operation, mode, headers, examples)
        for operation in (result.ok() for result in schema.get_all_operations())
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode is GenerationMode.POSITIVE or _can_be_malformed(operation)
    ]
    return [r for r in reports if r is not None]


def test_every_operation_with_a_valid_key_answers_as_documented(
    fuzz_schema: Any, fuzz_keys: dict[str, str]
) -> None:
    failures = fuzz(fuzz_schema, fuzz_keys["valid"], EXAMPLES["valid"])
    assert not failures, "\n\n".join(failures)


def test_every_operation_with_an_invalid_key_answers_as_documented(
    fuzz_schema: Any, fuzz_keys: dict[str, str]
) -> None:
    failures = fuzz(fuzz_schema, fuzz_keys["invalid"], EXAMPLES["invalid"])
    assert not failures, "\n\n".join(failures)
