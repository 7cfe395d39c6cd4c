"""The schema as SQLAlchemy typed models; Alembic migrations create it (rule: schema-by-migrations).

Every table carries ``org_id`` and every key the walk uses leads with it, so a distributed
Postgres (Citus, distributed by ``org_id``) routes a walk to one shard (``docs/scaling.md``).
Identifier columns use the ``"C"`` collation: ids compare bytewise, so ``a`` < ``a-b`` < ``ab``
everywhere (SQL ordering, Python ordering and index order agree).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Computed,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.dialects.postgresql.base import ischema_names
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import UserDefinedType

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Id = Text(collation="C")


class PgSnapshot(UserDefinedType[str]):
    """PostgreSQL's ``pg_snapshot`` (read and written as its text form)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        """The type's name in DDL."""
        return "pg_snapshot"


class Xid8(UserDefinedType[str]):
    """PostgreSQL's ``xid8``, a 64-bit transaction id (read and written as its text form)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        """The type's name in DDL."""
        return "xid8"


# reflected as themselves (the migrations' model check compares the database with these models)
ischema_names["pg_snapshot"] = PgSnapshot
ischema_names["xid8"] = Xid8


# Full-text documents of search (rule: search-lanes; migration 0003 says why they are built this
# way).
ENTITY_SEARCH_TSV = (
    "setweight(to_tsvector('english'::regconfig, name), 'A') || "
    "setweight(to_tsvector('english'::regconfig, CASE WHEN passage_total > 0 AND "
    "(passages_lossless OR passage_total < 64) THEN left(content, 600) ELSE content END), 'B')"
)
PASSAGE_SEARCH_TSV = (
    "setweight(to_tsvector('english'::regconfig, coalesce(breadcrumb, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, content), 'B')"
)
# The heads the full-text lane scans first: a memory's name, a passage's breadcrumb.
ENTITY_HEAD_TSV = "to_tsvector('english'::regconfig, name)"
PASSAGE_HEAD_TSV = "to_tsvector('english'::regconfig, coalesce(breadcrumb, ''))"
# A name's title after a conventional prefix (``PEP 8: ``, ``KEP-753: ``), lower-cased; null
# when the name has no such prefix (the exact lane, rule: search-lanes).
TITLE_PREFIX = "^[[:alpha:]]{2,12}[ -]?[0-9]+[[:alnum:]]*[[:space:]]*[-:.–—][[:space:]]+"
ENTITY_TITLE_LOWER = (
    f"CASE WHEN name ~ '{TITLE_PREFIX}' THEN lower(regexp_replace(name, '{TITLE_PREFIX}', '')) END"
)


class Base(DeclarativeBase):
    """Declarative base with a naming convention, so Alembic emits stable constraint names."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class Org(Base):
    """A tenant. Nothing crosses an org boundary."""

    __tablename__ = "orgs"
    id: Mapped[str] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()


class User(Base):
    """A principal of one org, with an org role (owner, admin, member, viewer)."""

    __tablename__ = "users"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    id: Mapped[str] = mapped_column(Id, primary_key=True)
    handle: Mapped[str] = mapped_column(Text, nullable=False)
    role: Mapped[str] = mapped_column(Text, nullable=False, server_default="member")
    created_at: Mapped[datetime] = _now()
    __table_args__ = (
        ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        UniqueConstraint("id"),
        CheckConstraint("role IN ('owner', 'admin', 'member', 'viewer')", name="role"),
    )


class ApiKey(Base):
    """An API key: only the SHA-256 of the secret is stored; scopes and an optional project list."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(Id, primary_key=True)
    org_id: Mapped[str] = mapped_column(Id, nullable=False)
    user_id: Mapped[str] = mapped_column(Id, nullable=False)
    key_hash: Mapped[str] = mapped_column(Text, nullable=False)
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    project_ids: Mapped[list[str] | None] = mapped_column(ARRAY(Id), nullable=True)
    label: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = _now()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "user_id"], ["users.org_id", "users.id"], ondelete="CASCADE"
        ),
        UniqueConstraint("key_hash"),
        CheckConstraint("scopes <@ ARRAY['read', 'write', 'admin']::text[]", name="scopes"),
    )


class Project(Base):
    """A project: ``private`` (members only) or ``org`` (every org member may read)."""

    __tablename__ = "projects"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    id: Mapped[str] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    visibility: Mapped[str] = mapped_column(Text, nullable=False, server_default="private")
    created_at: Mapped[datetime] = _now()
    __table_args__ = (
        ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        CheckConstraint("visibility IN ('private', 'org')", name="visibility"),
    )


class ProjectMember(Base):
    """A user's role in a project: viewer < contributor < maintainer < owner."""

    __tablename__ = "project_members"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    project_id: Mapped[str] = mapped_column(Id, primary_key=True)
    user_id: Mapped[str] = mapped_column(Id, primary_key=True)
    role: Mapped[str] = mapped_column(Text, nullable=False)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "project_id"], ["projects.org_id", "projects.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(
            ["org_id", "user_id"], ["users.org_id", "users.id"], ondelete="CASCADE"
        ),
        CheckConstraint("role IN ('viewer', 'contributor', 'maintainer', 'owner')", name="role"),
        Index("ix_project_members_user", "org_id", "user_id", "project_id"),
    )


class Entity(Base):
    """A memory. ``passage_*`` columns describe its current cut (rules: stale-passage-is-404,
    span-bound)."""

    __tablename__ = "entities"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    id: Mapped[str] = mapped_column(Id, primary_key=True)
    type: Mapped[str] = mapped_column(Text, nullable=False)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    project_id: Mapped[str | None] = mapped_column(Id, nullable=True)
    scope: Mapped[str] = mapped_column(Text, nullable=False)
    owner_id: Mapped[str | None] = mapped_column(Id, nullable=True)
    lifecycle: Mapped[str] = mapped_column(Text, nullable=False, server_default="active")
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    revision: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    passage_kind: Mapped[str | None] = mapped_column(Text, nullable=True)
    passage_total: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    passages_lossless: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    # the transaction that created it: the search statistics tell from it whether a count could
    # see the memory (term_audiences.counted_snapshot; NULL before migration 0008)
    created_xid: Mapped[str | None] = mapped_column(
        Xid8, nullable=True, server_default=text("pg_current_xact_id()")
    )
    search_tsv: Mapped[str | None] = mapped_column(
        TSVECTOR, Computed(ENTITY_SEARCH_TSV, persisted=True), nullable=True
    )
    head_tsv: Mapped[str | None] = mapped_column(
        TSVECTOR, Computed(ENTITY_HEAD_TSV, persisted=True), nullable=True
    )
    # a private memory's readers (owner, grantees) as lexemes, NULL elsewhere; kept by triggers
    # (migration 0015): with search_tsv, the full-text lane's private arm (rule: search-lanes)
    access_tsv: Mapped[str | None] = mapped_column(TSVECTOR, nullable=True)
    # lower(name), bytewise ordered: the exact lane's name-prefix range scan (rule: search-lanes).
    name_lower: Mapped[str | None] = mapped_column(
        Id, Computed("lower(name)", persisted=True), nullable=True
    )
    # the title after a conventional prefix, bytewise ordered: the exact lane's title scan
    title_lower: Mapped[str | None] = mapped_column(
        Id, Computed(ENTITY_TITLE_LOWER, persisted=True), nullable=True
    )
    __table_args__ = (
        ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["org_id", "project_id"], ["projects.org_id", "projects.id"]),
        ForeignKeyConstraint(["org_id", "owner_id"], ["users.org_id", "users.id"]),
        CheckConstraint("scope IN ('project', 'private', 'org')", name="scope"),
        CheckConstraint("lifecycle IN ('active', 'superseded', 'retired')", name="lifecycle"),
        CheckConstraint(
            "(scope <> 'org' OR project_id IS NULL)"
            " AND (scope <> 'project' OR project_id IS NOT NULL)",
            name="scope_project",
        ),
        CheckConstraint("passage_kind IN ('prose', 'evidence', 'declared')", name="passage_kind"),
        CheckConstraint("jsonb_typeof(metadata) = 'object'", name="metadata_object"),
        CheckConstraint("id NOT LIKE 'passage\\_%'", name="id_not_passage"),
        # The read probe of the walk: an index-only lookup of every column the read rule reads.
        Index(
            "ix_entities_read",
            "org_id",
            "id",
            unique=True,
            postgresql_include=["scope", "project_id", "owner_id", "lifecycle", "type"],
        ),
        Index("ix_entities_project", "org_id", "project_id"),
        Index("ix_entities_created_xid", "org_id", "created_xid"),  # the refresher (0009)
        # Search (rule: search-lanes): the full-text lane, and the exact lane's name-prefix range
        # scan.
        Index("ix_entities_search", "search_tsv", postgresql_using="gin"),
        Index("ix_entities_head", "head_tsv", postgresql_using="gin"),
        Index("ix_entities_name_prefix", "org_id", "name_lower", "id"),
        Index("ix_entities_title_prefix", "org_id", "title_lower", "id"),
        # the full-text lane's private arm: a reader's private memories holding a word (0015)
        Index(
            "ix_entities_access_search",
            text("(search_tsv || access_tsv)"),
            postgresql_using="gin",
            postgresql_where=text("access_tsv IS NOT NULL"),
        ),
    )


class EntityGrant(Base):
    """An explicit grant of one private memory to one user."""

    __tablename__ = "entity_grants"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    entity_id: Mapped[str] = mapped_column(Id, primary_key=True)
    user_id: Mapped[str] = mapped_column(Id, primary_key=True)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "entity_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(
            ["org_id", "user_id"], ["users.org_id", "users.id"], ondelete="CASCADE"
        ),
        # the full-text lane's private arm: the memories granted to a reader (0011)
        Index("ix_entity_grants_user", "org_id", "user_id", "entity_id"),
    )


class Edge(Base):
    """A typed, directed relationship ``src -relationship-> dst`` (rule: edge-direction)."""

    __tablename__ = "edges"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    src_id: Mapped[str] = mapped_column(Id, primary_key=True)
    relationship: Mapped[str] = mapped_column(Id, primary_key=True)
    dst_id: Mapped[str] = mapped_column(Id, primary_key=True)
    created_at: Mapped[datetime] = _now()
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "src_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(
            ["org_id", "dst_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        # Outgoing hops use the primary key (org_id, src_id, relationship, dst_id); incoming hops
        # use its mirror. Both cover what the walk reads, so each is an index-only scan.
        Index("ix_edges_incoming", "org_id", "dst_id", "relationship", "src_id", unique=True),
    )


class Mention(Base):
    """``src`` links to ``dst`` in its content (``[[id]]``, or a PEP's ``:pep:`` role)."""

    __tablename__ = "mentions"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    src_id: Mapped[str] = mapped_column(Id, primary_key=True)
    dst_id: Mapped[str] = mapped_column(Id, primary_key=True)
    # True when derived from a ``[[id]]`` link of src's content (re-derived on every body edit);
    # False when written explicitly (an import's ``mention`` record).
    derived: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "src_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(
            ["org_id", "dst_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        Index("ix_mentions_incoming", "org_id", "dst_id", "src_id", unique=True),
    )


class Passage(Base):
    """A span of a memory's body at one revision; as readable as its parent, read through it."""

    __tablename__ = "passages"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    id: Mapped[str] = mapped_column(Id, primary_key=True)
    parent_id: Mapped[str] = mapped_column(Id, nullable=False)
    parent_revision: Mapped[int] = mapped_column(Integer, nullable=False)
    passage_index: Mapped[int] = mapped_column(Integer, nullable=False)
    start_offset: Mapped[int] = mapped_column(Integer, nullable=False)
    end_offset: Mapped[int] = mapped_column(Integer, nullable=False)
    breadcrumb: Mapped[str | None] = mapped_column(Text, nullable=True)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    search_tsv: Mapped[str | None] = mapped_column(
        TSVECTOR, Computed(PASSAGE_SEARCH_TSV, persisted=True), nullable=True
    )
    head_tsv: Mapped[str | None] = mapped_column(
        TSVECTOR, Computed(PASSAGE_HEAD_TSV, persisted=True), nullable=True
    )
    # the parent's access_tsv (migration 0015's triggers copy it)
    access_tsv: Mapped[str | None] = mapped_column(TSVECTOR, nullable=True)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "parent_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        Index("ix_passages_search", "search_tsv", postgresql_using="gin"),
        Index("ix_passages_head", "head_tsv", postgresql_using="gin"),
        Index(
            "ix_passages_access_search",
            text("(search_tsv || access_tsv)"),
            postgresql_using="gin",
            postgresql_where=text("access_tsv IS NOT NULL"),
        ),
        CheckConstraint("id LIKE 'passage\\_%'", name="id_prefix"),
        CheckConstraint("passage_index >= 0", name="index_nonneg"),
        Index(
            "ix_passages_parent",
            "org_id",
            "parent_id",
            "passage_index",
            unique=True,
            postgresql_include=["id"],
        ),
    )


class Community(Base):
    """A community of memories detected among one audience's memories (rule:
    communities-follow-readability).

    ``audience`` is a project id (its project-scoped memories) or ``org`` (org-scoped memories):
    detection never mixes audiences, so a community is no route around the read rule.
    """

    __tablename__ = "communities"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    id: Mapped[str] = mapped_column(Id, primary_key=True)
    audience: Mapped[str] = mapped_column(Id, nullable=False)
    size: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    created_at: Mapped[datetime] = _now()
    __table_args__ = (ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),)


class CommunityMember(Base):
    """One memory's membership in one community."""

    __tablename__ = "community_members"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    community_id: Mapped[str] = mapped_column(Id, primary_key=True)
    entity_id: Mapped[str] = mapped_column(Id, primary_key=True)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "community_id"], ["communities.org_id", "communities.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(
            ["org_id", "entity_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        Index("ix_community_members_entity", "org_id", "entity_id", "community_id", unique=True),
    )


class CommunityRetirement(Base):
    """A write that retired (or may have changed) the org's communities, recorded in its
    transaction (migration 0010): the org is due a rebuild until one that saw this row commits
    (:mod:`app.service.workers.communities`)."""

    __tablename__ = "community_retirements"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    retired_at: Mapped[datetime] = _now()
    __table_args__ = (ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),)


class PendingLink(Base):
    """A ``[[dst]]`` link of ``src``'s content whose target did not exist (or was not readable
    by the writer) when ``src`` was written (rule: pending-links). It becomes a derived
    mention the moment a memory ``dst`` is created in the org (same import, later import, REST,
    MCP), and is re-derived with ``src``'s mentions on every body edit."""

    __tablename__ = "pending_links"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    src_id: Mapped[str] = mapped_column(Id, primary_key=True)
    dst_id: Mapped[str] = mapped_column(Id, primary_key=True)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "src_id"], ["entities.org_id", "entities.id"], ondelete="CASCADE"
        ),
        Index("ix_pending_links_target", "org_id", "dst_id", "src_id", unique=True),
    )


class TermAudience(Base):
    """The size of one audience's search documents, counted by ``sibyl-pg stats refresh`` (issue
    12; :mod:`app.repo.term_stats`). ``audience`` is a project id (its project-scoped memories)
    or ``*`` (the org-scoped ones; no id can be ``*``); private memories are never counted.
    ``documents``: memories and current passages; ``lengths``: the sum of their vectors' lengths
    (distinct lexemes). ``fresh`` turns false, in the same transaction, when a write changes or
    removes a counted row; search then weighs words as if no statistics existed until the next
    refresh."""

    __tablename__ = "term_audiences"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    audience: Mapped[str] = mapped_column(Id, primary_key=True)
    documents: Mapped[int] = mapped_column(BigInteger, nullable=False)
    lengths: Mapped[int] = mapped_column(BigInteger, nullable=False)
    fresh: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="true")
    refreshed_at: Mapped[datetime] = _now()
    # the token of the refresh that armed it before counting; cleared by a write that retires the
    # audience, replaced by a later refresh's arming: only an audience still armed by the same
    # refresh when its count ends is stamped fresh (migration 0006)
    armed_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the snapshot its counts were taken in: a memory whose creating transaction it does not
    # see is in none of them, and editing or deleting it does not retire the audience (0008)
    counted_snapshot: Mapped[str | None] = mapped_column(PgSnapshot, nullable=True)
    # the generation of term_impact_lists that holds its current impact lists (NULL: none);
    # written by a refresh's stamp after the lists themselves (migration 0011)
    impacts_generation: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    __table_args__ = (ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),)


class TermStat(Base):
    """How many of one audience's search documents hold one lexeme (its document frequency).
    Keyed lexeme before audience: a word's lookup is one index range over the audiences."""

    __tablename__ = "term_stats"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Id, primary_key=True)
    audience: Mapped[str] = mapped_column(Id, primary_key=True)
    df: Mapped[int] = mapped_column(Integer, nullable=False)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "audience"],
            ["term_audiences.org_id", "term_audiences.audience"],
            ondelete="CASCADE",
        ),
    )


class TermImpactList(Base):
    """One impact list: for a lexeme held by more of the org's counted documents than a list
    holds, ``audience``'s documents holding it with the highest BM25 term contribution, in
    order (rank 1 first), in that audience's lists of ``generation`` (:mod:`app.repo.term_stats`).
    The four arrays run in step: the document (a memory or a passage), its memory (itself, or a
    passage's parent), that memory's type, and the contribution. Keyed lexeme first: a word's
    lists are one index range."""

    __tablename__ = "term_impact_lists"
    org_id: Mapped[str] = mapped_column(Id, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Id, primary_key=True)
    audience: Mapped[str] = mapped_column(Id, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    doc_ids: Mapped[list[str]] = mapped_column(ARRAY(Id), nullable=False)
    memory_ids: Mapped[list[str]] = mapped_column(ARRAY(Id), nullable=False)
    memory_types: Mapped[list[str]] = mapped_column(ARRAY(Id), nullable=False)
    impacts: Mapped[list[float]] = mapped_column(ARRAY(Float), nullable=False)
    __table_args__ = (
        ForeignKeyConstraint(
            ["org_id", "audience"],
            ["term_audiences.org_id", "term_audiences.audience"],
            ondelete="CASCADE",
        ),
    )
