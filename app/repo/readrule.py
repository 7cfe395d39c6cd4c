"""The one read rule (rule: one-read-rule), as the single SQL fragment every read statement embeds.

``readable(alias)`` returns a boolean SQL expression over an ``entities`` row aliased ``alias``:

- ``project`` scope: its project is in the reader's readable project set;
- ``org`` scope: any member of the org, unless the key is restricted to projects;
- ``private`` scope: the reader owns it or holds a grant on it, **and** its project (if any) is
  readable; with no project, the key must not be restricted to projects.

The org bound (``alias.org_id = :r_org``) is part of the fragment. A passage is read through its
parent: statements join the parent entity and apply this same fragment to it, so a passage is
exactly as readable as its parent at read time. The fragment starts with the marker comment
``/* sibyl:read-rule */`` so a test can prove that every statement touching memories embeds it.

Parameters (bound, from :meth:`app.core.reader.Reader.params`): ``:r_org`` text, ``:r_user``
text, ``:r_projects`` text[], ``:r_restricted`` boolean; or, with :func:`readable_by`, the columns
of a reader row computed from the API key in the same statement.
"""

from __future__ import annotations

import re

READ_RULE_MARKER = "/* sibyl:read-rule */"

_TEMPLATE = """/* sibyl:read-rule */ ({t}.org_id = {org} AND (
        ({t}.scope = 'project' AND {t}.project_id = ANY({projects}))
     OR ({t}.scope = 'org' AND NOT {restricted})
     OR ({t}.scope = 'private'
         AND ({t}.owner_id = {user}
              OR EXISTS (SELECT 1 FROM entity_grants g
                         WHERE g.org_id = {t}.org_id AND g.entity_id = {t}.id
                           AND g.user_id = {user}))
         AND CASE WHEN {t}.project_id IS NULL THEN NOT {restricted}
                  ELSE {t}.project_id = ANY({projects}) END)))"""

_BOUND = {
    "org": ":r_org",
    "user": ":r_user",
    "projects": "CAST(:r_projects AS text[])",
    "restricted": ":r_restricted",
}

_ALIAS = re.compile(r"^[a-z][a-z0-9_]{0,30}$")


def _check(alias: str) -> str:
    if not _ALIAS.match(alias):
        raise ValueError(f"bad SQL alias {alias!r}")
    return alias


def readable(alias: str) -> str:
    """SQL boolean expression: the ``entities`` row ``alias`` is readable by the bound reader.

    ``alias`` is a fixed identifier of the calling query (never input); raises ``ValueError``
    otherwise.
    """
    return _TEMPLATE.format(t=_check(alias), **_BOUND)


def readable_by(alias: str, reader: str) -> str:
    """SQL boolean expression: the ``entities`` row ``alias`` is readable by the reader row
    ``reader`` of the same statement, the same rule as :func:`readable` with the reader's columns
    in place of the bound parameters: ``org_id`` text, ``user_id`` text, ``readable_projects``
    text[] and ``k_projects`` text[] (NULL: the key is not restricted), as
    :mod:`app.repo.readers` computes them. Lets one statement authenticate a key and read with
    it (one round trip fewer a request; rule: one-round-trip-expand). Both aliases are fixed
    identifiers of the calling query; raises ``ValueError`` otherwise.
    """
    r = _check(reader)
    return _TEMPLATE.format(
        t=_check(alias),
        org=f"{r}.org_id",
        user=f"{r}.user_id",
        projects=f"{r}.readable_projects",
        restricted=f"({r}.k_projects IS NOT NULL)",
    )
