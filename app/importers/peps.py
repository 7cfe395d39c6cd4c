"""Convert the PEP corpus (a folder of ``pep-NNNN.rst`` files) into import records (rule:
import-idempotent).

Pure Python, no database: :func:`iter_pep_records` reads the folder and yields plain dicts, one
import record each (write them one a line as NDJSON, or hand them to ``app.importers.ndjson``);
:func:`summarize` counts what a record stream holds.

Each file is an RFC 822-style header block (``PEP:``, ``Title:``, ``Author:``, ``Status:``,
``Type:``, ``Topic:``, ``Created:``, ``Requires:``, ``Replaces:``, ``Superseded-By:`` ...; a line
starting with whitespace continues the previous header), a blank line, then the reST body.

Mapping
-------
- **Org**: one, ``org_python`` ("Python").
- **Projects**, from the first topic of the ``Topic:`` header (topics are comma separated and
  matched case-insensitively): Typing → ``proj_typing`` (private), Packaging →
  ``proj_packaging`` (private), Governance → ``proj_governance`` (org-visible), Release →
  ``proj_release`` (org-visible); no ``Topic:`` → ``proj_core`` ("Core", org-visible). Any other
  topic ``T`` → ``proj_<slug(T)>`` named ``T``, org-visible: a topic is public subject matter,
  only the two the issue names are private. These five projects are always emitted (the demo
  readers need two of them); others only when a PEP uses them.
- **Users**: one per distinct author, ``user_<slug>`` with handle ``<slug>``, org role
  ``member`` (see :func:`parse_authors` and :func:`author_slug`; authors whose names slug the same
  are one user). An author slug equal to a demo handle gets ``_author`` appended. Each author is a
  ``contributor`` member of the project of every PEP they wrote. Demo readers:
  ``user_typing_reader`` (``viewer`` of ``proj_typing``), ``user_packaging_reader`` (``viewer``
  of ``proj_packaging``), ``user_org_admin`` (org role ``admin``, no membership) and
  ``user_outsider`` (org role ``member``, no membership).
- **Entities**: one per PEP, id ``pep_NNNN`` (four digits at least), name ``PEP N: Title``; type
  ``decision`` (Standards Track), ``document`` (Informational, and any type not listed here),
  ``procedure`` (Process). ``content`` is the body (leading blank lines and trailing whitespace
  dropped) with each reST section title turned into a Markdown heading, ``#`` per nesting level
  as docutils parses it (capped at ``######``), its over- and underline removed; every other
  character is kept as written. ``scope`` is ``private`` for ``Draft`` PEPs, ``project``
  otherwise; ``owner`` is the first author; ``lifecycle`` is ``superseded`` for status
  ``Superseded``, else ``active``. ``metadata``: ``status``, ``pep_type``, ``created`` (as
  written), ``python_version`` (as written, or null), ``authors`` (names, in header order) and
  ``topic`` (the whole ``Topic:`` value as written, or null).
- **Edges**: ``Requires: N`` → ``this -DEPENDS_ON-> N``; ``Replaces: N`` → ``this -SUPERSEDES->
  N``; ``Superseded-By: N`` → ``N -SUPERSEDES-> this``. Header values are comma separated lists;
  each item contributes its leading number (``8001 (note)`` → 8001) or the number of a
  ``pep-NNNN`` URL; other items are ignored. One edge per (src, dst, relationship), only between
  PEPs of the corpus, never a self-edge.
- **Mentions**: one per distinct (this, N) for each ``:pep:`N``` or ``:pep:`text <N>``` (with
  or without ``#anchor``) in the body, found textually, so that references inside
  Sphinx-only directives (``.. rejected::``, ``.. superseded::``...) and code samples count too.
  The role name is matched in lower case, as the corpus writes it: the two ``:PEP:`` spellings
  (PEP 249 → 248, PEP 820 → 697) are not counted. Only PEPs of the corpus, never itself.

Records come in dependency order: org, users, projects, members, entities, edges, mentions; within
a kind, in a fixed order (ids, PEP numbers), so two runs give identical output.

Section titles are found by parsing the body with docutils (no transforms, so nothing is promoted
to a document title). Only block structure matters, so inline markup is not parsed (a third of the
parse time, and no role such as ``:pep:`` or a Sphinx role is ever resolved); Sphinx directives
that docutils does not know become silent errors; file inclusion, raw output and syntax
highlighting are off; nothing is printed and docutils' global registries are left untouched.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import frontend, nodes, utils
from docutils.parsers.rst import Parser, states

__all__ = [
    "ID_RE",
    "ORG_ID",
    "PepSummary",
    "author_slug",
    "iter_pep_records",
    "parse_authors",
    "pep_records",
    "rst_titles_to_markdown",
    "summarize",
]

ORG_ID = "org_python"
ORG_NAME = "Python"
ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""Every id this module emits matches this pattern in full (rule: import-idempotent)."""

_PEP_FILE_RE = re.compile(r"pep-(\d+)\.rst")
_HEADER_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_MAX_SLUG = 100


@dataclass(frozen=True)
class _Project:
    id: str
    name: str
    visibility: str


_CORE_PROJECT = _Project("proj_core", "Core", "org")
_TOPIC_PROJECTS: dict[str, _Project] = {
    "typing": _Project("proj_typing", "Typing", "private"),
    "packaging": _Project("proj_packaging", "Packaging", "private"),
    "governance": _Project("proj_governance", "Governance", "org"),
    "release": _Project("proj_release", "Release", "org"),
}
_FIXED_PROJECTS: tuple[_Project, ...] = (_CORE_PROJECT, *_TOPIC_PROJECTS.values())

# (user id, org role): the demo readers of the issue, emitted after the authors.
_DEMO_USERS: tuple[tuple[str, str], ...] = (
    ("user_typing_reader", "member"),
    ("user_packaging_reader", "member"),
    ("user_org_admin", "admin"),
    ("user_outsider", "member"),
)
_DEMO_MEMBERS: tuple[tuple[str, str, str], ...] = (
    ("proj_typing", "user_typing_reader", "viewer"),
    ("proj_packaging", "user_packaging_reader", "viewer"),
)
_RESERVED_HANDLES = frozenset(uid.removeprefix("user_") for uid, _ in _DEMO_USERS)

_ENTITY_TYPES = {"standards track": "decision", "informational": "document", "process": "procedure"}

# Letters NFKD does not decompose into an ASCII base letter.
_FOLD = str.maketrans(
    {
        "Ł": "L", "ł": "l", "Ø": "O", "ø": "o", "Đ": "D", "đ": "d", "Ħ": "H", "ħ": "h",
        "ß": "ss", "Æ": "AE", "æ": "ae", "Œ": "OE", "œ": "oe", "Þ": "Th", "þ": "th",
        "ı": "i", "ð": "d", "Ð": "D",
    }
)  # fmt: skip
_NAME_SUFFIXES = frozenset({"jr", "jr.", "sr", "sr.", "ii", "iii", "iv", "phd", "ph.d."})
_EMAIL_RE = re.compile(r"[^\s<>()@,]+(?:@|\s+at\s+)[^\s<>()@,]+")
_PEP_ROLE_RE = re.compile(r":pep:`(?P<text>[^`]*)`")
_ROLE_EMBEDDED_RE = re.compile(r"<\s*(?:PEP\s*)?(\d+)\s*(?:#[^<>]*)?>$", re.IGNORECASE)
_ROLE_BARE_RE = re.compile(r"(?:PEP\s*)?(\d+)\s*(?:#.*)?", re.IGNORECASE | re.DOTALL)
_PAREN_NOTE_RE = re.compile(r"\([^()]*\)")
_REF_TOKEN_RE = re.compile(r"(?:PEP-?)?(\d+)", re.IGNORECASE)
_REF_URL_RE = re.compile(r"\bpep-(\d+)\b", re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# Public helpers


def parse_authors(value: str) -> list[str]:
    """Return the author names of an ``Author:`` header value, in order, without duplicates.

    Authors are comma separated (commas inside ``<...>`` or ``(...)`` do not split). Accepted
    forms: ``Name <email>``, ``email (Name)``, ``Name (note)``, ``Name``, ``<email>`` or a bare
    ``email`` (both give the address' local part). A chunk that is only a name suffix (``Jr.``,
    ``Sr.``, ``III``...) is glued to the previous name: ``Fred L. Drake, Jr. <fred@fdrake.net>``
    is one author, ``Fred L. Drake, Jr.``. Whitespace runs become one space; empty chunks (a
    trailing comma) are skipped. Never raises; an empty value gives ``[]``.
    """
    names: list[str] = []
    for chunk in _split_top_level(value):
        name = _author_name(chunk)
        if not name:
            continue
        if names and name.lower() in _NAME_SUFFIXES:
            names[-1] = f"{names[-1]}, {name}"
        elif name not in names:
            names.append(name)
    return names


def author_slug(name: str) -> str:
    """Return the ASCII slug of a person's name: ``Łukasz Langa`` → ``lukasz_langa``.

    Accents are folded with Unicode NFKD (plus a small table for letters without a
    decomposition: ``Ł``, ``Ø``, ``ß``, ``Æ``...), the result is lower-cased, every run of
    characters outside ``[a-z0-9]`` becomes one ``_``, and leading/trailing ``_`` are dropped; at
    most 100 characters. A name with no ASCII letter or digit left gets ``anon_<10 hex>`` from a
    hash of the name, so the slug is never empty and always matches :data:`ID_RE`.
    """
    folded = unicodedata.normalize("NFKD", name.translate(_FOLD))
    ascii_text = folded.encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "_", ascii_text).strip("_")[:_MAX_SLUG].rstrip("_")
    if not slug:
        slug = "anon_" + hashlib.sha1(name.encode("utf-8")).hexdigest()[:10]
    return slug


def rst_titles_to_markdown(body: str, source: str = "<rst>") -> str:
    """Return ``body`` with its reST section titles turned into Markdown headings.

    docutils parses ``body`` and decides which lines are section titles and how deep each
    section is nested; a title of a level-``n`` section becomes ``#``×n (at most 6), a space and
    the title text as written, and its underline (and overline, if any) lines are removed. Every
    other line is kept byte for byte, line endings included. Text in literal blocks, directives
    or comments is never taken for a title. ``source`` only names the text (docutils keeps it).

    Raises ``RuntimeError`` if a title docutils reports cannot be found at the line it reports
    (which would mean docutils changed how it tracks lines).
    """
    lines = body.splitlines(keepends=True)  # the same line breaks docutils splits on
    replaced: dict[int, str] = {}
    dropped: set[int] = set()
    with _no_cycle_collection():
        titles = _section_titles(body, source)
    for index, level, overlined in titles:
        if index >= len(lines) - 1 or (overlined and index == 0):
            raise RuntimeError(f"{source}: section title line {index + 1} is out of range")
        line = lines[index]
        text = line.splitlines()[0]
        replaced[index] = "#" * min(level, 6) + " " + text.strip() + line[len(text) :]
        dropped.add(index + 1)
        if overlined:
            dropped.add(index - 1)
    return "".join(replaced.get(i, line) for i, line in enumerate(lines) if i not in dropped)


# --------------------------------------------------------------------------------------------
# Corpus reading


@dataclass(frozen=True)
class _Pep:
    number: int
    path: Path
    title: str
    status: str
    pep_type: str
    created: str | None
    python_version: str | None
    topic: str | None
    authors: tuple[str, ...]
    requires: tuple[int, ...]
    replaces: tuple[int, ...]
    superseded_by: tuple[int, ...]
    body: str

    @property
    def entity_id(self) -> str:
        return _entity_id(self.number)


def _entity_id(number: int) -> str:
    return f"pep_{number:04d}"


def _split_top_level(value: str) -> list[str]:
    """Split on commas that are not inside ``<...>`` or ``(...)``."""
    chunks: list[str] = []
    depth = 0
    current: list[str] = []
    for char in value:
        if char in "<(":
            depth += 1
        elif char in ">)" and depth:
            depth -= 1
        if char == "," and depth == 0:
            chunks.append("".join(current))
            current = []
        else:
            current.append(char)
    chunks.append("".join(current))
    if depth:  # an unclosed "<" or "(": brackets cannot be trusted, split on every comma
        return value.split(",")
    return chunks


def _email_local_part(address: str) -> str:
    address = address.strip().strip("<>").strip()
    return re.split(r"@|\s+at\s+", address, maxsplit=1)[0].strip()


def _author_name(chunk: str) -> str:
    chunk = " ".join(chunk.split()).strip().strip('"').strip()
    if not chunk:
        return ""
    if "<" in chunk:  # Name <email> (anything after the address is ignored)
        name = chunk.split("<", 1)[0].strip().strip('"').strip()
        return name or _email_local_part(chunk.split("<", 1)[1].split(">", 1)[0])
    match = re.fullmatch(r"(?P<outer>[^()]*)\((?P<inner>[^()]*)\)(?P<tail>.*)", chunk)
    if match:
        outer = (match["outer"] + match["tail"]).strip()
        inner = match["inner"].strip()
        if not outer:
            return inner
        if _EMAIL_RE.fullmatch(outer):  # email (Name)
            return inner or _email_local_part(outer)
        return outer  # Name (note)
    if _EMAIL_RE.fullmatch(chunk):
        return _email_local_part(chunk)
    return chunk


def _pep_numbers(value: str | None) -> tuple[int, ...]:
    """PEP numbers listed in a Requires/Replaces/Superseded-By value, in order.

    Parenthesised notes are dropped; the rest is split on commas, semicolons and whitespace;
    a token counts if it is a number (optionally ``PEP``/``PEP-`` prefixed) or a URL naming
    ``pep-NNNN``. Anything else (words, dates in notes) is ignored.
    """
    if not value:
        return ()
    numbers: list[int] = []
    for token in re.split(r"[,;\s]+", _PAREN_NOTE_RE.sub(" ", value)):
        match = _REF_TOKEN_RE.fullmatch(token) or _REF_URL_RE.search(token)
        if match:
            numbers.append(int(match.group(1)))
    return tuple(numbers)


def _split_header(text: str, path: Path) -> tuple[dict[str, str], str]:
    """Return (headers by lower-cased name, body) of one PEP file's text."""
    lines = text.splitlines(keepends=True)
    headers: dict[str, str] = {}
    key: str | None = None
    end = len(lines)
    for number, line in enumerate(lines):
        if not line.strip():
            end = number
            break
        if line[0] in " \t":
            if key is None:
                raise ValueError(f"{path}: line 1: the header block starts with a continuation")
            headers[key] = f"{headers[key]} {line.strip()}".strip()
            continue
        name, colon, value = line.partition(":")
        if not colon or not _HEADER_NAME_RE.fullmatch(name.strip()):
            raise ValueError(f"{path}: line {number + 1}: not a 'Name: value' header: {line!r}")
        key = name.strip().lower()
        headers[key] = value.strip()
    body_lines = lines[end:]
    while body_lines and not body_lines[0].strip():
        body_lines.pop(0)
    return headers, "".join(body_lines).rstrip()


def _read_pep(path: Path, number: int) -> _Pep:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from exc
    headers, body = _split_header(text, path)
    missing = [h for h in ("pep", "title", "author", "status", "type") if not headers.get(h)]
    if missing:
        raise ValueError(f"{path}: missing header(s): {', '.join(missing)}")
    if not headers["pep"].isdigit() or int(headers["pep"]) != number:
        raise ValueError(f"{path}: header 'PEP: {headers['pep']}' does not match the file name")
    authors = tuple(parse_authors(headers["author"]))
    if not authors:
        raise ValueError(f"{path}: no author name in 'Author: {headers['author']}'")
    return _Pep(
        number=number,
        path=path,
        title=" ".join(headers["title"].split()),
        status=headers["status"],
        pep_type=headers["type"],
        created=headers.get("created") or None,
        python_version=headers.get("python-version") or None,
        topic=headers.get("topic") or None,
        authors=authors,
        requires=_pep_numbers(headers.get("requires")),
        replaces=_pep_numbers(headers.get("replaces")),
        superseded_by=_pep_numbers(headers.get("superseded-by")),
        body=body,
    )


def count_peps(corpus_dir: Path) -> int:
    """How many ``pep-NNNN.rst`` files ``corpus_dir`` holds (0 when it is not a folder): the
    number of entity records :func:`iter_pep_records` yields, known before any is parsed."""
    if not Path(corpus_dir).is_dir():
        return 0
    return sum(1 for path in Path(corpus_dir).iterdir() if _PEP_FILE_RE.fullmatch(path.name))


def _load_corpus(corpus_dir: Path) -> list[_Pep]:
    if not corpus_dir.is_dir():
        raise FileNotFoundError(f"PEP corpus folder not found: {corpus_dir}")
    files: dict[int, Path] = {}
    for path in corpus_dir.iterdir():
        match = _PEP_FILE_RE.fullmatch(path.name)
        if not match or not path.is_file():
            continue
        number = int(match.group(1))
        if number in files:
            raise ValueError(f"PEP {number} is in two files: {files[number]} and {path}")
        files[number] = path
    if not files:
        raise FileNotFoundError(f"no pep-NNNN.rst file in {corpus_dir}")
    return [_read_pep(files[number], number) for number in sorted(files)]


def _project_for(topic: str | None) -> _Project:
    first = (topic or "").split(",", 1)[0].strip()
    if not first:
        return _CORE_PROJECT
    known = _TOPIC_PROJECTS.get(first.lower())
    if known is not None:
        return known
    return _Project(f"proj_{author_slug(first)}", first, "org")


def _mentioned(body: str) -> list[int]:
    """PEP numbers referenced by ``:pep:`` roles in ``body``, distinct, in order of appearance."""
    found: dict[int, None] = {}
    for match in _PEP_ROLE_RE.finditer(body):
        text = " ".join(match["text"].split())
        target = _ROLE_EMBEDDED_RE.search(text) or _ROLE_BARE_RE.fullmatch(text)
        if target:
            found.setdefault(int(target.group(1)), None)
    return list(found)


# --------------------------------------------------------------------------------------------
# docutils: where the section titles are


class _TitleLineDocument(nodes.document):
    """A document that notes, for each section, the line docutils was at when it opened it.

    The state machine reports every line it reads to :meth:`note_source`, and a section is
    registered as an implicit target right after its underline was read, so ``current_line`` is
    then the 1-based number of the underline; the title is the line above it.
    """

    def __init__(self, settings: Any, reporter: utils.Reporter, source: str) -> None:
        super().__init__(settings, reporter, source=source)
        self.underlines: dict[int, int] = {}

    def note_implicit_target(
        self, target: nodes.Element, msgnode: nodes.Element | None = None
    ) -> None:
        if isinstance(target, nodes.section) and self.current_line is not None:
            self.underlines[id(target)] = self.current_line
        super().note_implicit_target(target, msgnode)


class _TextOnlyInliner(states.Inliner):
    """An inline "parser" that keeps every text run as plain text.

    Inline markup never changes block structure, so sections come out the same; skipping it
    saves about a third of the parse time, and no role is ever looked up (so neither ``:pep:``
    nor Sphinx roles need registering). It keeps the parse memo, whose ``title_styles`` tells
    which section levels have an overline.
    """

    def __init__(self) -> None:
        super().__init__()
        self.memo: Any = None

    def init_customizations(self, settings: Any) -> None:
        """Compile nothing: :meth:`parse` looks for no inline markup."""

    def parse(
        self, text: str, lineno: int, memo: Any, parent: nodes.Element
    ) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        """Return ``text`` as one text node, no message."""
        self.memo = memo
        return [nodes.Text(text)], []

    def adjust_uri(self, uri: str) -> str:
        """Keep hyperlink target URIs as written."""
        return uri


class _Discard:
    """A write-only stream that drops everything (docutils' warning stream)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


@functools.cache
def _docutils_settings() -> Any:
    settings = frontend.get_default_settings(Parser)
    settings.report_level = 5  # above SEVERE: never report
    settings.halt_level = 5  # never stop on an error (unknown directives and roles)
    settings.warning_stream = _Discard()
    settings.file_insertion_enabled = False  # `.. include::` and friends read nothing
    settings.raw_enabled = False
    settings.syntax_highlight = "none"  # no Pygments lexer per code block
    settings.tab_width = 8
    return settings


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cyclic garbage collector off for one parse, then one collection of the youngest
    generation, where everything the parse made still is. docutils' tree points from every node
    to its parent and its state machines to each other: the collector, run every few hundred
    allocations, walked the growing tree again and again (a third of a PEP's parse time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            gc.collect(0)


def _section_titles(body: str, source: str) -> list[tuple[int, int, bool]]:
    """Return (0-based title line, nesting level, has an overline) for each section, in order."""
    settings = _docutils_settings()
    document = _TitleLineDocument(settings, utils.new_reporter(source, settings), source)
    document.note_source(source, -1)
    inliner = _TextOnlyInliner()
    Parser(inliner=inliner).parse(body, document)
    styles: list[Any] = list(inliner.memo.title_styles) if inliner.memo is not None else []
    lines = body.splitlines()
    titles: list[tuple[int, int, bool]] = []
    for section in document.findall(nodes.section):
        level = 0
        node: nodes.Node | None = section
        while isinstance(node, nodes.section):
            level += 1
            node = node.parent
        underline = document.underlines.get(id(section))
        title = section.next_node(nodes.title)
        index = underline - 2 if underline is not None else -1
        if (
            title is None
            or not 0 <= index < len(lines)
            or lines[index].split() != title.rawsource.split()
            or level > len(styles)
        ):
            raise RuntimeError(f"{source}: cannot locate the source line of a section title")
        titles.append((index, level, len(styles[level - 1]) == 2))
    return titles


# --------------------------------------------------------------------------------------------
# Records


def iter_pep_records(corpus_dir: Path, *, workers: int = 1) -> Iterator[dict[str, Any]]:
    """Yield the §9 import records of the PEP corpus in ``corpus_dir``, in dependency order.

    Order: the org, users (authors by id, then the demo readers), projects, members, entities
    (by PEP number), edges, mentions; every id a record refers to was yielded before it. Every
    record is a fresh JSON-ready dict (str, list, dict, None values). The mapping is described
    in the module docstring.

    The folder is read and every header checked when this function is called, so errors come
    from the call, not from iteration: ``FileNotFoundError`` if ``corpus_dir`` is not a folder or
    holds no ``pep-NNNN.rst`` file; ``ValueError`` (naming the file) if a file is not UTF-8, has
    a malformed header block, lacks a ``PEP``/``Title``/``Author``/``Status``/``Type`` header,
    has a ``PEP:`` number that differs from its file name, or two files hold the same PEP.
    Bodies are parsed lazily, while entities are yielded; with ``workers`` > 1 they are parsed
    by that many processes (the CLI uses one per core: parsing is most of a PEP import's time)
    when the first entity is reached. Same records either way.
    """
    return pep_records(corpus_dir, workers=workers)[1]


def pep_records(corpus_dir: Path, *, workers: int = 1) -> tuple[int, Iterator[dict[str, Any]]]:
    """(how many records there are, known before any body is parsed: a progress bar's total;
    :func:`iter_pep_records`' iterator). The same errors, from the call."""
    peps = _load_corpus(Path(corpus_dir))
    head, tail, project_of, user_ids = _frame(peps)
    return len(head) + len(peps) + len(tail), _records(
        head, peps, tail, project_of, user_ids, workers=workers
    )


def _markdown(job: tuple[str, str]) -> str:
    """:func:`rst_titles_to_markdown` of (body, source), for a worker process."""
    return rst_titles_to_markdown(*job)


def _records(
    head: list[dict[str, Any]],
    peps: list[_Pep],
    tail: list[dict[str, Any]],
    project_of: dict[int, str],
    user_ids: dict[str, str],
    *,
    workers: int = 1,
) -> Iterator[dict[str, Any]]:
    yield from head
    jobs = [(pep.body, str(pep.path)) for pep in peps]
    with ExitStack() as stack:
        if workers > 1:  # results come in order as the workers finish them (a progress bar moves)
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers))
            contents: Iterable[str] = pool.map(_markdown, jobs, chunksize=16)
        else:
            contents = map(_markdown, jobs)
        for pep, content in zip(peps, contents, strict=True):
            yield _checked(_entity(pep, project_of[pep.number], user_ids, content))
    yield from tail


def _frame(
    peps: list[_Pep],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[int, str], dict[str, str]]:
    """The records around the entities, which need no parse: (the org, users, projects and
    members before them; the edges and mentions after them; each PEP's project id; each author
    name's user id)."""
    existing = {pep.number for pep in peps}
    user_ids: dict[str, str] = {}  # author name -> user id
    for pep in peps:
        for name in pep.authors:
            if name not in user_ids:
                slug = author_slug(name)
                if slug in _RESERVED_HANDLES:
                    slug = f"{slug}_author"
                user_ids[name] = f"user_{slug}"
    projects = {pep.number: _project_for(pep.topic) for pep in peps}
    all_projects = {project.id: project for project in _FIXED_PROJECTS}
    for project in sorted(projects.values(), key=lambda p: p.id):
        all_projects.setdefault(project.id, project)
    members: set[tuple[str, str]] = {
        (projects[pep.number].id, user_ids[name]) for pep in peps for name in pep.authors
    }
    project_order = {project_id: i for i, project_id in enumerate(all_projects)}

    head = [_checked({"kind": "org", "id": ORG_ID, "name": ORG_NAME})]
    head += [_user(user_id, "member") for user_id in sorted(set(user_ids.values()))]
    head += [_user(user_id, role) for user_id, role in _DEMO_USERS]
    head += [
        _checked(
            {
                "kind": "project",
                "id": project.id,
                "org": ORG_ID,
                "name": project.name,
                "visibility": project.visibility,
            }
        )
        for project in all_projects.values()
    ]
    head += [
        _checked(_member(project_id, user_id, "contributor"))
        for project_id, user_id in sorted(members, key=lambda m: (project_order[m[0]], m[1]))
    ]
    head += [
        _checked(_member(project_id, user_id, role)) for project_id, user_id, role in _DEMO_MEMBERS
    ]

    edges: dict[tuple[str, str, str], None] = {}
    for pep in peps:
        pairs = [(pep.number, n, "DEPENDS_ON") for n in pep.requires]
        pairs += [(pep.number, n, "SUPERSEDES") for n in pep.replaces]
        pairs += [(n, pep.number, "SUPERSEDES") for n in pep.superseded_by]
        for src, dst, relationship in pairs:
            if src != dst and src in existing and dst in existing:
                edges.setdefault((_entity_id(src), _entity_id(dst), relationship), None)
    tail = [
        _checked(
            {
                "kind": "edge",
                "org": ORG_ID,
                "src": src_id,
                "dst": dst_id,
                "relationship": relationship,
            }
        )
        for src_id, dst_id, relationship in sorted(edges)
    ]
    tail += [
        _checked(
            {"kind": "mention", "org": ORG_ID, "src": pep.entity_id, "dst": _entity_id(number)}
        )
        for pep in peps
        for number in sorted(_mentioned(pep.body))
        if number != pep.number and number in existing
    ]
    return head, tail, {n: p.id for n, p in projects.items()}, user_ids


def _user(user_id: str, role: str) -> dict[str, Any]:
    return _checked(
        {
            "kind": "user",
            "id": user_id,
            "org": ORG_ID,
            "handle": user_id.removeprefix("user_"),
            "role": role,
        }
    )


def _member(project_id: str, user_id: str, role: str) -> dict[str, Any]:
    return {"kind": "member", "project": project_id, "user": user_id, "role": role}


def _entity(pep: _Pep, project_id: str, user_ids: dict[str, str], content: str) -> dict[str, Any]:
    status = pep.status
    return {
        "kind": "entity",
        "id": pep.entity_id,
        "org": ORG_ID,
        "type": _ENTITY_TYPES.get(pep.pep_type.lower(), "document"),
        "name": f"PEP {pep.number}: {pep.title}",
        "content": content,
        "project": project_id,
        "scope": "private" if status.lower() == "draft" else "project",
        "owner": user_ids[pep.authors[0]],
        "lifecycle": "superseded" if status.lower() == "superseded" else "active",
        "metadata": {
            "status": status,
            "pep_type": pep.pep_type,
            "created": pep.created,
            "python_version": pep.python_version,
            "authors": list(pep.authors),
            "topic": pep.topic,
        },
    }


_ID_FIELDS = ("id", "org", "project", "user", "owner", "src", "dst")


def _checked(record: dict[str, Any]) -> dict[str, Any]:
    for field in _ID_FIELDS:
        value = record.get(field)
        if value is not None and not ID_RE.fullmatch(value):
            raise ValueError(f"{record['kind']} record has an invalid {field} id: {value!r}")
    return record


# --------------------------------------------------------------------------------------------
# Summary


@dataclass(frozen=True)
class PepSummary:
    """What a stream of import records holds (see :func:`summarize`)."""

    entities: int
    depends_on_pairs: int
    supersedes_pairs: int
    mention_pairs: int
    users: int
    projects: int


def summarize(records: Iterable[dict[str, Any]]) -> PepSummary:
    """Count distinct entities, users and projects (by id) and distinct edge/mention pairs.

    ``depends_on_pairs`` and ``supersedes_pairs`` count distinct (src, dst) of edge records with
    that relationship; ``mention_pairs`` distinct (src, dst) of mention records. Records of other
    kinds (org, member, grant, other relationships) are ignored. Consumes ``records``; raises
    ``KeyError`` if a counted record lacks its id, src or dst field.
    """
    entities: set[str] = set()
    users: set[str] = set()
    projects: set[str] = set()
    depends: set[tuple[str, str]] = set()
    supersedes: set[tuple[str, str]] = set()
    mentions: set[tuple[str, str]] = set()
    for record in records:
        kind = record.get("kind")
        if kind == "entity":
            entities.add(record["id"])
        elif kind == "user":
            users.add(record["id"])
        elif kind == "project":
            projects.add(record["id"])
        elif kind == "mention":
            mentions.add((record["src"], record["dst"]))
        elif kind == "edge" and record.get("relationship") == "DEPENDS_ON":
            depends.add((record["src"], record["dst"]))
        elif kind == "edge" and record.get("relationship") == "SUPERSEDES":
            supersedes.add((record["src"], record["dst"]))
    return PepSummary(
        entities=len(entities),
        depends_on_pairs=len(depends),
        supersedes_pairs=len(supersedes),
        mention_pairs=len(mentions),
        users=len(users),
        projects=len(projects),
    )
