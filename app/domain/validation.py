"""Input rules shared by every verb: malformed input is a 400 (``BadRequest``) with a message that
names the field, never a stored row (rule: hidden-is-absent)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from app.core import policy
from app.core.errors import BadRequest

NAME_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
DOT_SEGMENTS = frozenset({".", ".."})
"""Ids the id pattern admits but no URL path can name (HTTP clients resolve them as ``./``
and ``../``): refused where an id is chosen (a memory, a project, an import's records)."""
DOT_SEGMENT_ID = "cannot be '.' or '..': a URL path cannot name it"


def path_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a new id (``must match ...`` or :data:`DOT_SEGMENT_ID`), or
    None when it can."""
    if not ID_RE.fullmatch(value):
        return "must match [A-Za-z0-9_.:-]{1,128}"
    if value in DOT_SEGMENTS:
        return DOT_SEGMENT_ID
    return None


BAD_TEXT = "text must be valid UTF-8 without NUL characters"


def is_clean_text(value: str) -> bool:
    """True iff ``value`` can be stored and echoed: no NUL character, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_text(value: str, *, field: str) -> str:
    """``value`` unchanged, or ``BadRequest`` naming ``field`` when it holds a NUL character or
    a lone surrogate (PostgreSQL text cannot store them; JSON cannot echo them)."""
    if not is_clean_text(value):
        raise BadRequest(f"{field}: {BAD_TEXT}")
    return value


def nfc(value: str) -> str:
    """``value`` in Unicode normalization form C, the one form text is stored and compared in
    (rule: text-in-nfc): ``cafe\u0301`` is stored ``café``, so every spelling a user types finds it.
    Free for text already in NFC (a quick check first)."""
    return value if unicodedata.is_normalized("NFC", value) else unicodedata.normalize("NFC", value)


LINE_BREAKS_AND_CONTROLS = "one line without control characters (newline, tab, ESC)"
NOT_BLANK = "not blank"
""":func:`line_problem`'s answer for text of only spaces and invisible characters: callers
that word a blank value their own way compare against it."""
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Bidirectional embeddings, overrides and isolates: they reorder the text that follows them
as a terminal or a page shows it (a "Trojan Source" name can read as another). The marks
U+200E and U+200F, which a right-to-left name may need, are not among them."""


def _off_the_line(c: str) -> bool:
    """A control character, a line or paragraph separator, or a bidi control."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in BIDI_CONTROLS


_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*")
"""Printable ASCII holding a visible character: a line :func:`line_problem` never refuses."""


def line_problem(value: str) -> str | None:
    """Why ``value`` is not one line of printable text, or None. Refused: control characters
    (Unicode Cc: newline, tab, ESC, which would drive the terminal that prints the name), line
    and paragraph separators (Zl, Zp: U+2028 is a line break in JSON-reading editors) and the
    bidi controls of :data:`BIDI_CONTROLS`; and text made only of spaces and invisible format
    characters (Cf: U+200B, U+FEFF), a name that shows as nothing. The rule of memory names
    (``app.domain.entities``), declared span labels (``app.domain.spans``) and their import."""
    if _PRINTABLE_ASCII.fullmatch(value):  # the common case, answered without a loop
        return None
    if any(_off_the_line(c) for c in value):
        return LINE_BREAKS_AND_CONTROLS + " or bidirectional overrides"
    if all(c.isspace() or unicodedata.category(c) == "Cf" for c in value):
        return NOT_BLANK
    return None


def printable_line(value: str) -> str:
    """``value`` with what :func:`line_problem` refuses made harmless, for text derived from
    a body (a Markdown heading becomes a breadcrumb): each refused character is a space, the
    spaces collapsed."""
    if value.isascii() and value.isprintable():  # the common case, answered without a loop
        return " ".join(value.split())
    return " ".join("".join(" " if _off_the_line(c) else c for c in value).split())


def normalize_seeds(entity_ids: Sequence[Any]) -> list[str]:
    """Strip each seed and drop exact duplicates keeping order (rule: seeds-normalised).

    Raises ``BadRequest`` for an empty list, a list of more than
    :data:`app.core.policy.MAX_NAMES` ids (as for every list of a request; expand walks 8 and
    returns the rest in ``unresolved``, so 300,000 seeds would come back as a 3.3 MB echo), a blank
    or non-string id, or one holding a NUL character or a lone surrogate. Ids that cannot exist
    (outside the id alphabet) are kept: they simply do not resolve, like any absent id.
    """
    if len(entity_ids) == 0:
        raise BadRequest("entity_ids must name at least one entity")
    if len(entity_ids) > policy.MAX_NAMES:
        raise BadRequest(f"entity_ids may list at most {policy.MAX_NAMES} ids")
    seen: set[str] = set()
    out: list[str] = []
    for raw in entity_ids:
        if not isinstance(raw, str) or not raw.strip():
            raise BadRequest("entity_ids must be non-blank strings")
        seed = clean_text(raw, field="entity_ids").strip()
        if seed not in seen:
            seen.add(seed)
            out.append(seed)
    return out


def normalize_names(values: Sequence[str] | None, *, field: str, upper: bool) -> list[str] | None:
    """Upper- or lower-case relationship/type names; each must match ``[A-Za-z0-9_]{1,64}``.

    ``None`` stays ``None`` (no filter). Duplicates are dropped, order kept. Raises
    ``BadRequest`` for a malformed name (rule: seeds-normalised), a list of more than
    :data:`app.core.policy.MAX_NAMES` entries, or an empty list: it would filter everything
    out, and a caller sending ``[]`` most often means "no filter" (``lifecycle: []`` is refused
    the same way). Linear in the list's length.
    """
    if values is None:
        return None
    if not values:
        raise BadRequest(f"{field} is empty, which would match nothing: omit it for no filter")
    if len(values) > policy.MAX_NAMES:
        raise BadRequest(f"{field} may list at most {policy.MAX_NAMES} names")
    out: dict[str, None] = {}
    for value in values:
        if not NAME_RE.fullmatch(value):
            raise BadRequest(f"{field} entries must match [A-Za-z0-9_]{{1,64}}")
        out[value.upper() if upper else value.lower()] = None
    return list(out)


def normalize_project(project: str | None) -> str | None:
    """A stripped project id, or None; ``BadRequest`` when blank or outside the id alphabet."""
    if project is None:
        return None
    value = project.strip()
    if not ID_RE.fullmatch(value):
        raise BadRequest("project must be an id matching [A-Za-z0-9_.:-]{1,128}")
    return value


def require_id(value: str, *, field: str) -> str:
    """A stripped, non-blank id without NUL or lone surrogates; ``BadRequest`` naming ``field``
    otherwise."""
    stripped = clean_text(value, field=field).strip()
    if not stripped:
        raise BadRequest(f"{field} must be a non-blank string")
    return stripped


SYNTHETIC_RELATIONSHIPS = frozenset({"SHARES_COMMUNITY", "MENTIONS"})


def stored_relationship(name: str) -> str:
    """The upper-cased name of an edge a writer may store (rules: edge-direction,
    relationship-policy).

    Raises ``BadRequest`` for a name outside ``[A-Za-z0-9_]{1,64}`` or a synthetic relationship
    (``SHARES_COMMUNITY`` comes from communities, ``MENTIONS`` from links and mention records).
    """
    if not NAME_RE.fullmatch(name):
        raise BadRequest("relationship must match [A-Za-z0-9_]{1,64}")
    upper = name.upper()
    if upper in SYNTHETIC_RELATIONSHIPS:
        raise BadRequest(f"{upper} is synthetic and cannot be stored as an edge")
    return upper
