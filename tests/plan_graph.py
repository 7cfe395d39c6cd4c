"""A generated graph big enough for the planner to prefer indexes (issue 7 plan tests).

One org of its own: 20k memories (every scope, some superseded and retired, private ones with
grants), about 100k edges of which a fifth point into five hubs and a tenth leave them, 20k
mentions, 20k passages under 1,667 cut documents, and 100 communities. Rows are made in the
database with ``INSERT ... SELECT generate_series`` (seconds; foreign-key triggers are skipped
when the test role is a superuser, since every reference is valid by construction), then the
tables are vacuumed and analyzed so the planner sees real statistics and a fresh visibility map.
Its words (``plg...``) are its own, so other tests' searches never match its rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

ENTITIES = 20_000
RANDOM_EDGES = 70_000
HUB_IN_EDGES = 20_000
HUB_OUT_EDGES = 10_000
MENTIONS = 20_000
GRANTS = 5_000
USERS = 40
PROJECTS = 8
HUBS = 5
SPANS = 12  # passages of each cut document (every memory i with i % 12 == 4)


@dataclass(frozen=True)
class PlanGraph:
    """Ids of the generated org that tests need."""

    org: str
    admin: str
    member: str

    def entity(self, i: int) -> str:
        """The id of memory number ``i`` (1-based; 1..5 are the hubs)."""
        return f"{self.org}_e{i:06d}"

    def document(self) -> str:
        """A memory that was cut into passages (a document with 12 spans)."""
        return self.entity(16)  # i % 12 == 4: a cut document; i % 10 < 7: project scope

    def passage(self, k: int) -> str:
        """The id of span ``k`` of :meth:`document`."""
        return f"passage_{self.document()}_{k:02d}"


def _sql(org: str) -> list[str]:
    o = f"'{org}'"
    e = f"{o} || '_e' || lpad(CAST(%s AS text), 6, '0')"
    rnd = f"1 + floor(random() * {ENTITIES})::int"
    member = f"1 + ((c * 20 + k) * {PROJECTS} + c % {PROJECTS}) % {ENTITIES}"
    rels = (
        "(ARRAY['DEPENDS_ON','BLOCKS','RELATED_TO','SUPPORTS','IMPLEMENTED','REFERENCES',"
        "'SUPERSEDES','ABOUT'])[1 + floor(random() * 8)::int]"
    )
    return [
        "SELECT setseed(0.42)",
        f"INSERT INTO orgs (id, name) VALUES ({o}, 'Plan test graph')",
        f"""INSERT INTO users (org_id, id, handle, role)
            SELECT {o}, {o} || '_u' || i, 'u' || i, CASE WHEN i = 0 THEN 'admin' ELSE 'member' END
            FROM generate_series(0, {USERS - 1}) i""",
        f"""INSERT INTO projects (org_id, id, name, visibility)
            SELECT {o}, {o} || '_p' || i, 'Project ' || i,
                   CASE WHEN i < {PROJECTS // 2} THEN 'org' ELSE 'private' END
            FROM generate_series(0, {PROJECTS - 1}) i""",
        f"""INSERT INTO project_members (org_id, project_id, user_id, role)
            SELECT DISTINCT {o}, {o} || '_p' || ((i + k) % {PROJECTS}), {o} || '_u' || i,
                   'contributor'
            FROM generate_series(0, {USERS - 1}) i, (VALUES (0), (3)) AS s(k)""",
        f"""INSERT INTO entities (org_id, id, type, name, content, project_id, scope, owner_id,
                                  lifecycle, passage_kind, passage_total, passages_lossless)
            SELECT {o}, {e % "i"},
                   (ARRAY['decision','task','note','artifact','document','observation'])
                       [1 + i % 6],
                   'Plgnode ' || i, 'plgbody plgnode' || i || ' ' || repeat('plgword ', i % 40),
                   CASE WHEN i % 10 < 9 THEN {o} || '_p' || (i % {PROJECTS}) END,
                   CASE WHEN i % 10 < 7 THEN 'project' WHEN i % 10 < 9 THEN 'private'
                        ELSE 'org' END,
                   {o} || '_u' || (i % {USERS}),
                   CASE WHEN i <= {HUBS} THEN 'active' WHEN i % 97 = 0 THEN 'retired'
                        WHEN i % 50 = 0 THEN 'superseded' ELSE 'active' END,
                   CASE WHEN i % 12 = 4 THEN 'prose' END,
                   CASE WHEN i % 12 = 4 THEN {SPANS} ELSE 0 END,
                   i % 12 = 4
            FROM generate_series(1, {ENTITIES}) i""",
        "ANALYZE entities",
        f"""INSERT INTO entity_grants (org_id, entity_id, user_id)
            SELECT {o}, {e % "x.i"}, {o} || '_u' || floor(random() * {USERS})::int
            FROM (SELECT 10 * floor(random() * {ENTITIES // 10})::int + 7 + (g % 2) AS i
                  FROM generate_series(1, {GRANTS}) g) x
            WHERE x.i BETWEEN 1 AND {ENTITIES}
            ON CONFLICT DO NOTHING""",
        f"""INSERT INTO edges (org_id, src_id, relationship, dst_id)
            SELECT DISTINCT {o}, {e % "x.s"}, x.r, {e % "x.d"}
            FROM (SELECT {rnd} AS s, {rnd} AS d, {rels} AS r
                  FROM generate_series(1, {RANDOM_EDGES})
                  UNION ALL
                  SELECT {rnd}, 1 + floor(random() * {HUBS})::int, {rels}
                  FROM generate_series(1, {HUB_IN_EDGES})
                  UNION ALL
                  SELECT 1 + floor(random() * {HUBS})::int, {rnd}, {rels}
                  FROM generate_series(1, {HUB_OUT_EDGES})) x
            WHERE x.s <> x.d""",
        f"""INSERT INTO mentions (org_id, src_id, dst_id)
            SELECT DISTINCT {o}, {e % "x.s"}, {e % "x.d"}
            FROM (SELECT {rnd} AS s, {rnd} AS d FROM generate_series(1, {MENTIONS})) x
            WHERE x.s <> x.d""",
        f"""INSERT INTO passages (org_id, id, parent_id, parent_revision, passage_index,
                                  start_offset, end_offset, breadcrumb, content)
            SELECT {o}, 'passage_' || {e % "i"} || '_' || lpad(CAST(k AS text), 2, '0'),
                   {e % "i"}, 1, k, k * 100, k * 100 + 100, 'plgpart ' || k,
                   'plgspan ' || k || ' plgnode' || i || ' ' || repeat('plgtext ', 20)
            FROM generate_series(1, {ENTITIES}) i, generate_series(0, {SPANS - 1}) k
            WHERE i % 12 = 4""",
        f"""INSERT INTO communities (org_id, id, audience, size)
            SELECT {o}, {o} || '_c' || c, {o} || '_p' || (c % {PROJECTS}), 20
            FROM generate_series(0, 99) c""",
        f"""INSERT INTO community_members (org_id, community_id, entity_id)
            SELECT {o}, {o} || '_c' || c, {e % member}
            FROM generate_series(0, 99) c, generate_series(0, 19) k
            ON CONFLICT DO NOTHING""",
    ]


TABLES = (
    "entities",
    "entity_grants",
    "edges",
    "mentions",
    "passages",
    "communities",
    "community_members",
    "projects",
    "project_members",
    "users",
)


async def generate(url: str, org: str) -> PlanGraph:
    """Create the graph of org ``org`` in the database at ``url`` (a ``postgresql://`` URL)."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            if await conn.fetchval("SELECT current_setting('is_superuser') = 'on'"):
                # Every generated reference points at a generated row by construction: skip the
                # per-row foreign-key triggers (half the load time) when allowed to.
                await conn.execute("SET LOCAL session_replication_role = replica")
            for statement in _sql(org):
                await conn.execute(statement)
        for table in TABLES:
            await conn.execute(f"VACUUM (ANALYZE) {table}")
    finally:
        await conn.close()
    return PlanGraph(org=org, admin=f"{org}_u0", member=f"{org}_u1")
