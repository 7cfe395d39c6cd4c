"""The semantic lane (search's opt-in vectors), on the PostgreSQL 16 that ships pgvector (the
``pgserver`` binaries, as ``make run`` starts them); the machine's PostgreSQL 15 has none.

- a reader's semantic answers are exactly an exact search under the read rule: hidden memories'
  vectors change no rank, score or page (pair test, byte for byte against an org without them);
- a reader who sees 1 % of the passages gets a full page from the lane when one exists, also
  when the index path is tried first;
- without pgvector, or without the model, search answers from the lexical lanes and
  ``filters.lanes.semantic`` says why;
- the worker embeds what writes change, and only the current revision is searched;
- the real model (``minilm``, the ``semantic`` extra) finds a paraphrase no word of which the
  memory holds.

Most tests use the ``hashing`` embedder (a bag of hashed words): what is under test is the lane's
reading of vectors, not the model's meaning.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core import embedder as models
from app.core.db import make_engine, read_tx
from app.core.errors import Unauthorized
from app.core.migrations import upgrade
from app.core.settings import Settings
from app.domain.schemas import SearchRequest, SearchResponse
from app.domain.search import SearchSettings, search
from app.domain.search import semantic as semantic_lane
from app.repo import term_stats
from app.repo.readers import reader_by_key
from app.service.search import search_for_key
from app.service.workers.embeddings import embed_due
from tests.builders import import_dicts, make_key, memory_record, org_records
from tests.pgtemp import ThrowawayPostgres

HASHING = SearchSettings(semantic=True, embedder=models.HASHING, fulltext=False, exact=False)
"""The semantic lane alone, with the hashing embedder."""


@pytest.fixture(scope="module")
def pg16() -> Iterator[ThrowawayPostgres]:
    pg = ThrowawayPostgres()
    try:
        pg.start()
        upgrade(pg.url)
        yield pg
    finally:
        pg.destroy()


@pytest.fixture(scope="module")
async def vec_engine(pg16: ThrowawayPostgres) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(pg16.url)
    yield engine
    await engine.dispose()


async def _ask(
    engine: AsyncEngine, key: str, query: str, settings: SearchSettings = HASHING, **body: object
) -> SearchResponse:
    async with engine.connect() as conn:
        reader = await reader_by_key(conn, key=key)
    assert reader is not None
    async with read_tx(engine) as conn:
        return await search(
            conn,
            reader,
            SearchRequest(query=query, **body),
            pipeline=settings,
        )


def _world(org: str, sfx: str, *, hidden: bool) -> list[dict]:
    out = org_records(org, sfx, {"ann": "member", "bob": "member"})
    out.append(
        {"kind": "member", "project": "p1", "user": f"user_bob_{sfx}", "role": "contributor"}
    )
    topics = ["kelp forests in cold water", "coral reefs in warm seas", "tides along the coast"]
    out += [
        memory_record(org, sfx, f"v_{i}", f"Note {i}", f"{topics[i % 3]} and item {i}")
        for i in range(12)
    ]
    if hidden:  # bob's: the project p1 and his private memories, near the query's meaning
        out += [
            memory_record(
                org, sfx, f"h_{i}", "Kelp", "kelp forests cold water", project="p1", owner="bob"
            )
            for i in range(20)
        ]
        out += [
            memory_record(
                org,
                sfx,
                f"hp_{i}",
                "Kelp",
                "kelp forests cold water kelp",
                scope="private",
                owner="bob",
            )
            for i in range(5)
        ]
    return out


async def _load(engine: AsyncEngine, records: list[dict]) -> None:
    await import_dicts(engine, records)
    await embed_due(engine, model_name=models.HASHING)


def _two_projects(org: str, sfx: str, open_n: int, closed_n: int, closed_text: str) -> list[dict]:
    """ann and bob, bob a viewer of the private project p1; ``open_n`` memories about kelp in
    the open project p2 (``o_<i>``), ``closed_n`` of ``closed_text`` in p1 (``c_<i>``)."""
    out = org_records(org, sfx, {"ann": "member", "bob": "member"})
    out.append({"kind": "member", "project": "p1", "user": f"user_bob_{sfx}", "role": "viewer"})
    out += [
        memory_record(org, sfx, f"o_{i}", f"Open {i}", f"kelp forests cold water open {i}")
        for i in range(open_n)
    ]
    out += [
        memory_record(org, sfx, f"c_{i}", f"Closed {i}", f"{closed_text} {i}", project="p1")
        for i in range(closed_n)
    ]
    return out


async def test_hidden_vectors_change_nothing_a_reader_sees(vec_engine):
    pages = {}
    for hidden in (True, False):
        sfx, org = secrets.token_hex(3), "org_vec_" + secrets.token_hex(4)
        await _load(vec_engine, _world(org, sfx, hidden=hidden))
        ann = await make_key(vec_engine, f"user_ann_{sfx}")
        bob = await make_key(vec_engine, f"user_bob_{sfx}")
        got = [
            (await _ask(vec_engine, ann, q, limit=5, offset=o)).model_dump(exclude={"filters"})
            for q in ("kelp forests cold water", "warm coral seas")
            for o in (0, 5)
        ]
        pages[hidden] = json.dumps(got)
        seen = await _ask(vec_engine, bob, "kelp forests cold water", limit=20)
        # allowed: bob reads p1 and his own memories, and finds them
        assert any(r.id.startswith("h") for r in seen.results) == hidden
        assert seen.filters["lanes"]["semantic"]["ran"] is True
    # denied: ann's pages are byte for byte those of the org where they do not exist
    assert pages[True] == pages[False]


async def test_a_reader_who_sees_one_percent_gets_a_full_page(vec_engine):
    # 1,000 memories in the org's open project, 10 (1 %) in p1, which bob's key is bound to
    sfx, org = secrets.token_hex(3), "org_vec1_" + secrets.token_hex(4)
    await _load(vec_engine, _two_projects(org, sfx, 990, 10, "a closed note number"))
    bob = await make_key(vec_engine, f"user_bob_{sfx}", projects=["p1"])
    for limit_exact in (10_000, 0):  # exact at once; the index first (then exact: too few)
        settings = HASHING.replace(semantic_exact_limit=limit_exact, semantic_k=10)
        got = await _ask(vec_engine, bob, "kelp forests cold water", settings, limit=10)
        assert sorted(r.id for r in got.results) == sorted(f"c_{i}" for i in range(10))
        assert got.filters["lanes"]["semantic"]["path"] == "exact"


async def test_the_index_path_reads_as_many_chunks_as_its_readers_share_needs(vec_engine):
    """ann reads the open project's 120 memories, not the closed project's 120 (half the org's
    documents, two chunks each: the name, the body): with ``semantic_k`` 20 and the margin 2,
    the index path reads 2 × 20 × 2 ÷ 0.5 = 160 nearest chunks and finds a full page in them,
    all ann's; bob, who reads the whole org, reads 80."""
    sfx, org = secrets.token_hex(3), "org_vecef_" + secrets.token_hex(4)
    await _load(vec_engine, _two_projects(org, sfx, 120, 120, "kelp forests cold water"))
    await term_stats.refresh_orgs(vec_engine, [org])
    settings = HASHING.replace(semantic_exact_limit=0, semantic_k=20)
    for handle, ef, prefix in (("ann", 160, "o_"), ("bob", 80, "")):
        key = await make_key(vec_engine, f"user_{handle}_{sfx}")
        got = await _ask(vec_engine, key, "kelp forests cold water", settings, limit=20)
        lane = got.filters["lanes"]["semantic"]
        assert (lane["path"], lane["ef"]) == ("index", ef), handle
        assert len(got.results) == 20 and all(r.id.startswith(prefix) for r in got.results)


def test_the_index_paths_reads_follow_chunks_per_document_and_stay_in_bounds():
    """Two chunks a document double the reads; a reader of 1 % would need more than pgvector
    allows (``semantic_ef``, 1000); a generous reader never reads fewer than ``semantic_k``;
    memories without vectors yet do not count as documents with one chunk."""
    s = SearchSettings(semantic_k=50)

    def ef(readable: int, org: int, memories: int, embedded: int, chunks: int, **kw) -> int:
        return semantic_lane.index_ef(
            s.replace(**kw),
            readable_documents=readable,
            org_documents=org,
            memories=memories,
            embedded=embedded,
            chunks=chunks,
        )

    assert ef(500, 1000, 100, 100, 1000) == 400  # half the org, two chunks a document
    assert ef(1000, 1000, 100, 100, 1000) == 100  # the whole org, one chunk a document
    assert ef(1000, 1000, 100, 50, 1000) == 200  # half embedded: 1,000 vectors for 500 documents
    assert ef(10, 1000, 10, 10, 10) == 1000
    assert ef(1000, 1000, 100, 100, 1000, semantic_ef_margin=0.1) == 50


async def test_without_pgvector_search_is_lexical_and_says_so(engine):
    """The machine's PostgreSQL 15 has no pgvector: the lane does not run, and says why."""
    sfx, org = secrets.token_hex(3), "org_vec0_" + secrets.token_hex(4)
    await import_dicts(
        engine,
        [
            *org_records(org, sfx, {"ann": "member"}),
            memory_record(org, sfx, "k1", "Kelp", "kelp forests"),
        ],
    )
    ann = await make_key(engine, f"user_ann_{sfx}")
    got = await _ask(engine, ann, "kelp", HASHING.replace(fulltext=True, exact=True))
    assert [r.id for r in got.results] == ["k1"]
    lane = got.filters["lanes"]["semantic"]
    assert lane["ran"] is False and "pgvector" in lane["reason"]


async def test_without_the_model_search_is_lexical_and_says_so(vec_engine, monkeypatch):
    sfx, org = secrets.token_hex(3), "org_vecm_" + secrets.token_hex(4)
    await _load(
        vec_engine,
        [
            *org_records(org, sfx, {"ann": "member"}),
            memory_record(org, sfx, "k1", "Kelp", "kelp forests"),
        ],
    )
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    monkeypatch.setattr(models, "available", lambda name: "the semantic extra is not installed")
    got = await _ask(vec_engine, ann, "kelp", HASHING.replace(fulltext=True, exact=True))
    assert [r.id for r in got.results] == ["k1"]
    assert got.filters["lanes"]["semantic"] == {
        "ran": False,
        "reason": "the semantic extra is not installed",
    }


async def test_an_edit_is_embedded_again_and_only_its_current_text_is_found(
    vec_engine, monkeypatch
):
    monkeypatch.setattr(semantic_lane, "COVERAGE_TTL_S", 0.0)  # every answer counts afresh
    sfx, org = secrets.token_hex(3), "org_vece_" + secrets.token_hex(4)
    await _load(
        vec_engine,
        [
            *org_records(org, sfx, {"ann": "member"}),
            memory_record(org, sfx, "e1", "Note", "kelp forests cold water"),
            memory_record(org, sfx, "e2", "Other", "desert sand dunes"),
        ],
    )
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    before = await _ask(vec_engine, ann, "kelp forests cold water", limit=1)
    assert [r.id for r in before.results] == ["e1"]
    assert before.filters["lanes"]["semantic"]["coverage"] == 1.0
    await import_dicts(  # a new body: a new revision, its vectors stale until the worker runs
        vec_engine,
        [memory_record(org, sfx, "e1", "Note", "volcanic ash and basalt")],
    )
    stale = await _ask(vec_engine, ann, "kelp forests cold water", limit=2)
    assert [r.id for r in stale.results] == ["e2"]  # the old text is never found
    assert stale.filters["lanes"]["semantic"]["coverage"] == 0.5
    assert await embed_due(vec_engine, model_name=models.HASHING) == 1
    after = await _ask(vec_engine, ann, "volcanic basalt ash", limit=1)
    assert [r.id for r in after.results] == ["e1"]


@pytest.mark.skipif(
    models.available(models.MINILM) is not None, reason="the semantic extra is not installed"
)
async def test_the_model_finds_a_paraphrase_that_shares_no_word(vec_engine):
    sfx, org = secrets.token_hex(3), "org_vecp_" + secrets.token_hex(4)
    await import_dicts(
        vec_engine,
        [
            *org_records(org, sfx, {"ann": "member"}),
            memory_record(
                org, sfx, "pet", "Evening", "My dog loves to chase the ball in the park."
            ),
            memory_record(org, sfx, "tax", "Paperwork", "The quarterly invoices were filed today."),
        ],
    )
    await embed_due(vec_engine, model_name=models.MINILM)
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    settings = SearchSettings(semantic=True, fulltext=False, exact=False)
    got = await _ask(vec_engine, ann, "Which puppy plays fetch outdoors?", settings, limit=2)
    assert [r.id for r in got.results][:1] == ["pet"]
    assert got.filters["lanes"]["semantic"]["model"] == models.MINILM


async def test_one_memory_id_in_two_orgs_gets_each_its_own_vectors(vec_engine):
    """Memory ids are unique within an org only: two orgs' ``twin`` are embedded from their own
    texts (allowed: each org's vectors are its own text's), never from each other's (denied:
    the other org's text is in neither). Keyed by id alone, one store held both memories'
    chunks and failed on its own primary key."""
    orgs = {"org_twa_" + secrets.token_hex(4): "kelp", "org_twb_" + secrets.token_hex(4): "tax"}
    for org, word in orgs.items():
        sfx = secrets.token_hex(3)  # users are unique across orgs
        body = f"{word} {word} {word} notes"
        await import_dicts(
            vec_engine,
            [
                *org_records(org, sfx, {"ann": "member"}),
                memory_record(org, sfx, "twin", word, body),
            ],
        )
    await embed_due(vec_engine, model_name=models.HASHING)
    async with vec_engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT org_id, doc_id, chunk, embedding::text AS v FROM embeddings"
                    " WHERE org_id = ANY(:orgs) AND memory_id = 'twin' ORDER BY 1, 2, 3"
                ),
                {"orgs": list(orgs)},
            )
        ).all()
    by_org: dict[str, list[tuple[str, int, str]]] = {}
    for r in rows:
        by_org.setdefault(r.org_id, []).append((r.doc_id, r.chunk, r.v))
    assert set(by_org) == set(orgs)
    a, b = (by_org[o] for o in orgs)
    assert [(d, c) for d, c, _ in a] == [(d, c) for d, c, _ in b]  # the same shape of documents
    assert len({(d, c) for d, c, _ in a}) == len(a)  # each chunk once
    assert [v for _, _, v in a] != [v for _, _, v in b]  # each from its own text


# --- the re-ranking stage (app/domain/search/rerank.py) -----------------------------------

RERANK = SearchSettings(embedder=models.HASHING, rerank=True)
"""The lexical lanes, then the re-ranking by the hashing embedder's vectors."""


def _near_and_far(org: str, sfx: str) -> list[dict]:
    """``far`` holds every word of the query often (the higher BM25) among other words, in one
    chunk; ``near`` holds the query's words once each, and nothing else (the nearer vector)."""
    return [
        *org_records(org, sfx, {"ann": "member"}),
        memory_record(
            org,
            sfx,
            "far",
            "Notes",
            "kelp kelp kelp forests forests cold cold water water divers boats harbour ropes",
        ),
        memory_record(org, sfx, "near", "Diary", "kelp forests cold water"),
    ]


async def test_the_rerank_orders_the_head_by_bm25_blended_with_similarity(vec_engine):
    sfx, org = secrets.token_hex(3), "org_rr_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    query = "kelp forests cold water"
    lexical = await _ask(vec_engine, ann, query, RERANK.replace(rerank=False))
    assert [r.id for r in lexical.results] == ["far", "near"]
    assert lexical.filters["rerank"] == {"ran": False, "reason": "off"}
    by_meaning = await _ask(vec_engine, ann, query, RERANK.replace(rerank_weight=0.0))
    assert [r.id for r in by_meaning.results] == ["near", "far"]
    assert by_meaning.filters["rerank"] == {"ran": True, "top": 2}
    match = {r.id: r.metadata["match"] for r in by_meaning.results}
    assert match["near"]["similarity"] > match["far"]["similarity"]
    # BM25 alone: the fused order stands, with each row's blended score in its match
    by_text = await _ask(vec_engine, ann, query, RERANK.replace(rerank_weight=1.0))
    assert [r.id for r in by_text.results] == ["far", "near"]
    assert by_text.results[0].metadata["match"]["rerank_score"] == 1.0


async def test_the_rerank_keeps_the_fused_order_until_every_head_memory_has_vectors(vec_engine):
    sfx, org = secrets.token_hex(3), "org_rrv_" + secrets.token_hex(4)
    await import_dicts(vec_engine, _near_and_far(org, sfx))  # the worker has not run yet
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    got = await _ask(vec_engine, ann, "kelp forests cold water", RERANK.replace(rerank_weight=0.0))
    assert [r.id for r in got.results] == ["far", "near"]
    assert got.filters["rerank"] == {
        "ran": False,
        "reason": "2 of the first 2 memories have no vectors by hashing yet",
    }
    assert "similarity" not in got.results[0].metadata["match"]


async def test_hidden_vectors_change_nothing_the_rerank_orders(vec_engine):
    """The rerank reads only the head's own vectors, under the read rule: ann's pages (which
    hold no hidden memory) are byte for byte those of the org without bob's hidden memories,
    while bob, who may read them, finds them re-ranked."""
    pages = {}
    settings = RERANK.replace(rerank_weight=0.3, rerank_top=8)
    for hidden in (True, False):
        sfx, org = secrets.token_hex(3), "org_rrh_" + secrets.token_hex(4)
        await _load(vec_engine, _world(org, sfx, hidden=hidden))
        ann = await make_key(vec_engine, f"user_ann_{sfx}")
        bob = await make_key(vec_engine, f"user_bob_{sfx}")
        got = []
        for q in ("kelp forests cold water", "warm coral seas"):
            answer = await _ask(vec_engine, ann, q, settings, limit=5)
            assert answer.filters["rerank"]["ran"] is True
            got.append(answer.model_dump(exclude={"filters"}))
        pages[hidden] = json.dumps(got)
        seen = await _ask(vec_engine, bob, "kelp forests cold water", settings, limit=20)
        assert seen.filters["rerank"]["ran"] is True
        assert any(r.id.startswith("h") for r in seen.results) == hidden
    assert pages[True] == pages[False]


async def test_without_pgvector_the_rerank_says_so(engine):
    sfx, org = secrets.token_hex(3), "org_rr0_" + secrets.token_hex(4)
    await import_dicts(engine, _near_and_far(org, sfx))
    ann = await make_key(engine, f"user_ann_{sfx}")
    got = await _ask(engine, ann, "kelp forests cold water", RERANK.replace(rerank_weight=0.0))
    assert [r.id for r in got.results] == ["far", "near"]
    assert got.filters["rerank"]["ran"] is False
    assert "pgvector" in got.filters["rerank"]["reason"]


def test_the_rerank_is_on_by_default_and_the_environment_turns_it_off(monkeypatch):
    from app.core.settings import Settings
    from app.domain.search import search_settings

    assert search_settings(Settings()).rerank is True
    monkeypatch.setenv("SIBYL_SEARCH_RERANK", "false")
    assert search_settings(Settings()).rerank is False
    monkeypatch.setenv("SIBYL_EMBEDDER", "minlm")  # a typo is refused at start, not ignored
    with pytest.raises(ValueError, match="minilm"):
        Settings()


async def test_an_org_without_vectors_costs_no_query_vector(vec_engine, monkeypatch):
    """Before the worker has written any vector of an org, the re-ranking says so without
    making the query's vector (one cached look); once vectors exist it runs."""
    sfx, org = secrets.token_hex(3), "org_rrn_" + secrets.token_hex(4)
    await import_dicts(vec_engine, _near_and_far(org, sfx))
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    made: list[str] = []
    real = semantic_lane.query_vector

    async def counted(model: str, text: str, reader) -> list[float]:
        made.append(text)
        return await real(model, text, reader)

    monkeypatch.setattr(semantic_lane, "query_vector", counted)
    monkeypatch.setattr(semantic_lane, "COVERAGE_TTL_S", 0.0)  # every search looks again
    settings = RERANK.replace(rerank_weight=0.0)
    before = await _ask(vec_engine, ann, "kelp forests cold water", settings)
    assert before.filters["rerank"]["ran"] is False and made == []
    await embed_due(vec_engine, model_name=models.HASHING)
    after = await _ask(vec_engine, ann, "kelp forests cold water", settings)
    assert after.filters["rerank"]["ran"] is True and made == ["kelp forests cold water"]
    assert [r.id for r in after.results] == ["near", "far"]


async def test_the_rerank_names_how_many_head_memories_wait_for_vectors(vec_engine):
    """An edit makes one memory's vectors stale: the re-ranking waits for it, says how many of
    the head wait, and makes no query vector; the worker's next pass lets it run again."""
    sfx, org = secrets.token_hex(3), "org_rrp_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    await import_dicts(
        vec_engine, [memory_record(org, sfx, "near", "Diary", "kelp forests cold water today")]
    )
    settings = RERANK.replace(rerank_weight=0.0)
    stale = await _ask(vec_engine, ann, "kelp forests cold water", settings)
    assert stale.filters["rerank"] == {
        "ran": False,
        "reason": "1 of the first 2 memories have no vectors by hashing yet",
    }
    await embed_due(vec_engine, model_name=models.HASHING)
    again = await _ask(vec_engine, ann, "kelp forests cold water", settings)
    assert again.filters["rerank"]["ran"] is True


@pytest.mark.skipif(
    models.available(models.MINILM) is not None, reason="the semantic extra is not installed"
)
async def test_vectors_of_another_model_are_never_compared(vec_engine):
    """Vectors written by one model are not compared with a query vector of another: the lane
    finds nothing and the re-ranking waits, as if the memories had no vectors."""
    sfx, org = secrets.token_hex(3), "org_rrm_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))  # hashing vectors only
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    lane = await _ask(
        vec_engine, ann, "kelp forests cold water", HASHING.replace(embedder=models.MINILM)
    )
    assert lane.results == [] and lane.filters["lanes"]["semantic"]["ran"] is True
    rerank = await _ask(vec_engine, ann, "kelp forests", SearchSettings(rerank=True))
    assert rerank.filters["rerank"]["reason"] == (
        "2 of the first 2 memories have no vectors by minilm: 2 have vectors by hashing, which "
        "no serving process replaces (sibyl-pg embed --model minilm)"
    )


class _BatchDependent:
    """A stand-in model whose vectors move with the size of the batch they are made in, as a
    real model's do in the last digits (padding)."""

    name = models.HASHING

    def encode(self, texts):
        base = models.embedder(models.HASHING).encode(texts)
        return [[x + 1e-3 * len(texts) for x in v] for v in base]


async def test_a_memorys_vectors_do_not_depend_on_what_else_was_due(vec_engine):
    """Each memory's chunks are encoded apart from other memories', so what else was due at
    the same time (another reader's hidden memories) never moves its vectors."""
    stored = {}
    for others in (0, 5):
        sfx, org = secrets.token_hex(3), "org_rrb_" + secrets.token_hex(4)
        records = [
            *org_records(org, sfx, {"ann": "member"}),
            memory_record(org, sfx, "mine", "Mine", "kelp forests\n\ncold water"),
        ]
        records += [
            memory_record(org, sfx, f"o_{i}", "Other", "coral reefs\n\nwarm seas\n\ntides")
            for i in range(others)
        ]
        await import_dicts(vec_engine, records)
        await embed_due(vec_engine, model_name=models.HASHING, model=_BatchDependent())
        async with vec_engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT chunk, embedding::text AS v FROM embeddings"
                    " WHERE org_id = :org AND memory_id = 'mine' ORDER BY chunk"
                ),
                {"org": org},
            )
            stored[others] = [(r.chunk, r.v) for r in rows]
    assert len(stored[0]) == 2 and stored[0] == stored[5]  # the name, the body


async def test_the_query_model_is_loaded_before_the_service_is_ready(vec_engine, engine):
    """Where vectors can be used the model is loaded at start, not by the first searches;
    where they cannot (no pgvector) it is not loaded at all."""
    from app.service.workers.embeddings import warm_query_model

    assert await warm_query_model(vec_engine, models.HASHING) is True
    assert await warm_query_model(engine, models.HASHING) is False


def test_embed_refuses_while_another_embedder_writes(pg16, monkeypatch):
    """Two embedders would store the same memories' rows (the second failed on the primary
    key): ``sibyl-pg embed`` takes the worker's lock and, while another holds it, says so and
    exits 1 without writing."""
    import asyncio

    import asyncpg
    from typer.testing import CliRunner

    from app.cli.main import cli
    from app.core.settings import get_settings

    async def hold_and_run() -> tuple[int, str]:
        holder = await asyncpg.connect(pg16.url)
        try:
            held = await holder.fetchval(
                "SELECT pg_try_advisory_lock(hashtext('sibyl-pg'), hashtext('embeddings.worker'))"
            )
            assert held
            monkeypatch.setenv("DATABASE_URL", pg16.url)
            get_settings.cache_clear()
            ran = await asyncio.to_thread(
                CliRunner().invoke, cli, ["embed", "--model", models.HASHING]
            )
            return ran.exit_code, ran.output
        finally:
            await holder.close()
            get_settings.cache_clear()

    code, output = asyncio.run(hold_and_run())
    assert code == 1, output
    assert "another embedder is writing vectors now" in output


@pytest.mark.skipif(
    models.available(models.MINILM) is not None, reason="the semantic extra is not installed"
)
def test_query_vectors_and_the_worker_share_one_copy_of_the_model():
    """A serving process held two copies (the worker asked for one thread, the query path for
    none): one instance per model, whatever the thread count asked later."""
    assert models.embedder(models.MINILM, 1) is models.embedder(models.MINILM)
    assert models.embedder(models.HASHING) is models.embedder(models.HASHING, 1)


def _watch_encodes(monkeypatch: pytest.MonkeyPatch, engine: AsyncEngine) -> list[tuple[str, int]]:
    """Each text the hashing model encodes from now on, with the number of ``engine``'s pooled
    connections checked out at that moment."""
    model = models.embedder(models.HASHING)
    real = model.encode
    seen: list[tuple[str, int]] = []

    def encode(texts):
        seen.extend((t, engine.pool.checkedout()) for t in texts)
        return real(texts)

    monkeypatch.setattr(model, "encode", encode)
    return seen


async def _started(engine: AsyncEngine) -> None:
    """What the service does at start where vectors can be used: load the model, and note that
    the database holds the lane's tables."""
    from app.service.workers.embeddings import warm_query_model

    assert await warm_query_model(engine, models.HASHING)


SERVICE = Settings(embedder=models.HASHING, search_rerank=True)
"""The service's settings with the hashing model: the re-ranking on, the semantic lane off."""


async def test_the_query_vector_is_made_before_the_search_holds_a_connection(
    vec_engine, monkeypatch
):
    """A burst of searches once held every pooled connection while their query vectors waited
    for the CPU: the vector is now made after the key is checked and before the search's
    transaction, once, and the search's re-ranking uses it."""
    sfx, org = secrets.token_hex(3), "org_rra_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    await _started(vec_engine)
    seen = _watch_encodes(monkeypatch, vec_engine)
    query = f"kelp forests cold water {sfx}"
    got = await search_for_key(vec_engine, ann, SearchRequest(query=query), SERVICE)
    assert got.filters["rerank"] == {"ran": True, "top": 2}
    assert all("similarity" in r.metadata["match"] for r in got.results)
    assert seen == [(query, 0)]  # made once, with no connection held


async def test_a_key_that_does_not_authenticate_buys_no_query_vector(vec_engine, monkeypatch):
    """Only an authenticated key's search makes a vector: an unknown key is refused (401) before
    the model runs, as a search without the step refuses it."""
    await _started(vec_engine)
    seen = _watch_encodes(monkeypatch, vec_engine)
    request = SearchRequest(query="kelp forests cold water " + secrets.token_hex(3))
    with pytest.raises(Unauthorized):
        await search_for_key(vec_engine, "sk_" + secrets.token_hex(16), request, SERVICE)
    with pytest.raises(Unauthorized):
        await search_for_key(vec_engine, None, request, SERVICE)
    assert seen == []


async def test_an_org_short_of_vectors_gets_no_query_vector_ahead(vec_engine, monkeypatch):
    """While the worker has not written an org's vectors, its searches make no vector ahead
    (the re-ranking would not use it); once a search re-ranks again, they do."""
    sfx, org = secrets.token_hex(3), "org_rrs_" + secrets.token_hex(4)
    await import_dicts(vec_engine, _near_and_far(org, sfx))  # no vectors yet
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    await _started(vec_engine)
    seen = _watch_encodes(monkeypatch, vec_engine)
    first = await search_for_key(vec_engine, ann, SearchRequest(query=f"kelp {sfx}"), SERVICE)
    assert first.filters["rerank"]["ran"] is False
    assert len(seen) == 1  # the org was not known to be short: one vector made ahead, unused
    second = await search_for_key(vec_engine, ann, SearchRequest(query=f"cold {sfx}"), SERVICE)
    assert second.filters["rerank"]["ran"] is False and len(seen) == 1
    await embed_due(vec_engine, model_name=models.HASHING)
    seen.clear()
    third = await search_for_key(vec_engine, ann, SearchRequest(query=f"water {sfx}"), SERVICE)
    assert third.filters["rerank"]["ran"] is True
    assert [c for _, c in seen] == [1]  # made inside the search's transaction, which re-ranked
    fourth = await search_for_key(vec_engine, ann, SearchRequest(query=f"forests {sfx}"), SERVICE)
    assert fourth.filters["rerank"]["ran"] is True
    assert [c for _, c in seen] == [1, 0]  # and ahead again


async def test_without_pgvector_a_search_is_one_snapshot_and_makes_no_vector(engine, monkeypatch):
    """Where vectors cannot be used, the step ahead does nothing: no second snapshot (the key is
    checked once) and no vector."""
    from sqlalchemy import event

    from app.service.workers.embeddings import warm_query_model

    sfx, org = secrets.token_hex(3), "org_rr1_" + secrets.token_hex(4)
    await import_dicts(engine, _near_and_far(org, sfx))
    ann = await make_key(engine, f"user_ann_{sfx}")
    assert await warm_query_model(engine, models.HASHING) is False  # no pgvector: known
    seen = _watch_encodes(monkeypatch, engine)
    sent: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        got = await search_for_key(engine, ann, SearchRequest(query=f"kelp {sfx}"), SERVICE)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert got.results and got.filters["rerank"]["ran"] is False
    assert sum(s.startswith("/* sibyl:reader.by_key */") for s in sent) == 1
    assert seen == []


async def test_the_worker_leaves_vectors_by_another_model_alone(vec_engine, caplog):
    """A process started with another model once rewrote every memory's vectors in the
    background (two such processes undid each other): the worker now leaves alone an org whose
    memories hold vectors by another model, and warns, while it keeps other orgs up; a retired
    memory's old vectors hold nothing back; ``embed`` (deliberate) replaces them, and then the
    worker keeps the org up again."""
    from app.service.workers.embeddings import EmbeddingWorker

    sfx, org = secrets.token_hex(3), "org_rrm_" + secrets.token_hex(4)
    osfx, other_org = secrets.token_hex(3), "org_rrk_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))
    state = text("SELECT memory_id, model FROM embedding_state WHERE org_id = :o ORDER BY 1")
    async with vec_engine.begin() as conn:  # as if another process's model had written them
        await conn.execute(
            text("UPDATE embedding_state SET model = 'other-model' WHERE org_id = :o"), {"o": org}
        )
    await import_dicts(vec_engine, [memory_record(org, sfx, "new", "New", "kelp again")])
    await import_dicts(vec_engine, _near_and_far(other_org, osfx))  # another org, no vectors
    worker = EmbeddingWorker(vec_engine, interval_s=60, model_name=models.HASHING)
    try:
        with caplog.at_level("WARNING", logger="sibyl_pg.embeddings"):
            assert await worker.tick() == 2  # the other org's two memories, not this org's
        assert f"{org} (other-model: 2 memories)" in caplog.text
        async with vec_engine.connect() as conn:
            rows = (await conn.execute(state, {"o": org})).all()
            kept_up = (await conn.execute(state, {"o": other_org})).all()
        assert [tuple(r) for r in rows] == [("far", "other-model"), ("near", "other-model")]
        assert [tuple(r) for r in kept_up] == [("far", "hashing"), ("near", "hashing")]

        assert await embed_due(vec_engine, model_name=models.HASHING) == 3  # the deliberate act
        async with vec_engine.begin() as conn:  # a retired memory's old vectors block nothing
            await conn.execute(
                text(
                    "UPDATE embedding_state SET model = 'other-model' "
                    "WHERE org_id = :o AND memory_id = 'far'"
                ),
                {"o": org},
            )
            await conn.execute(
                text("UPDATE entities SET lifecycle = 'retired' WHERE org_id = :o AND id = 'far'"),
                {"o": org},
            )
        await import_dicts(vec_engine, [memory_record(org, sfx, "newer", "Newer", "kelp")])
        assert await worker.tick() == 1  # no other model's vectors that count: it keeps up
        async with vec_engine.begin() as conn:  # stale vectors by another model block nothing
            await conn.execute(
                text(
                    "UPDATE embedding_state SET model = 'other-model', revision = revision - 1 "
                    "WHERE org_id = :o AND memory_id = 'new'"
                ),
                {"o": org},
            )
        assert await worker.tick() == 1  # 'new' is due (stale), and the org is not skipped
        async with vec_engine.connect() as conn:
            rows = (await conn.execute(state, {"o": org})).all()
        assert dict(tuple(r) for r in rows) == {
            "far": "other-model",
            "near": "hashing",
            "new": "hashing",
            "newer": "hashing",
        }
    finally:
        await worker.close()


def test_embed_with_org_writes_only_that_orgs_vectors(pg16, monkeypatch):
    """``sibyl-pg embed --org A`` embeds A's due memories and leaves another org's due (a small
    org beside the PEPs need not wait for the PEPs' vectors); without ``--org`` every org's."""
    import asyncio

    from typer.testing import CliRunner

    from app.cli.main import cli
    from app.core.settings import get_settings

    sfx = secrets.token_hex(3)
    orgs = ["org_eo_a_" + sfx, "org_eo_b_" + sfx]

    async def load() -> None:
        engine = make_engine(pg16.url)
        try:
            for n, org in enumerate(orgs):
                await import_dicts(engine, _near_and_far(org, f"{sfx}{n}"))
        finally:
            await engine.dispose()

    async def embedded() -> dict[str, int]:
        engine = make_engine(pg16.url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text(
                        "SELECT org_id, count(*) AS n FROM embedding_state "
                        "WHERE org_id = ANY(:orgs) AND model = 'hashing' GROUP BY org_id"
                    ),
                    {"orgs": orgs},
                )
                return {r.org_id: int(r.n) for r in rows}
        finally:
            await engine.dispose()

    asyncio.run(load())
    monkeypatch.setenv("DATABASE_URL", pg16.url)
    get_settings.cache_clear()
    try:
        one = CliRunner().invoke(cli, ["embed", "--model", models.HASHING, "--org", orgs[0]])
        assert one.exit_code == 0, one.output
        assert "2 memories embedded with hashing" in one.output
        assert asyncio.run(embedded()) == {orgs[0]: 2}
        every = CliRunner().invoke(cli, ["embed", "--model", models.HASHING])
        assert every.exit_code == 0, every.output
        assert asyncio.run(embedded()) == {orgs[0]: 2, orgs[1]: 2}
        typo = CliRunner().invoke(cli, ["embed", "--model", models.HASHING, "--org", "org_nope"])
        assert typo.exit_code == 2 and "no such org: org_nope" in typo.output
    finally:
        get_settings.cache_clear()


async def test_a_burst_past_the_query_models_queue_is_answered_without_re_ranking(
    vec_engine, monkeypatch
):
    """Query vectors wait for the model's threads, at most ``QUERY_QUEUE_MAX`` at once: a search
    that would need one more is answered at once, in the fused order (no 503, no longer queue),
    and ``filters.rerank`` says why; the searches that queued re-rank."""
    import asyncio
    import threading

    sfx, org = secrets.token_hex(3), "org_rrq_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    await _started(vec_engine)
    model = models.embedder(models.HASHING)
    real, release = model.encode, threading.Event()

    def held(texts):
        release.wait(30)
        return real(texts)

    monkeypatch.setattr(model, "encode", held)
    monkeypatch.setattr(semantic_lane, "QUERY_QUEUE_MAX", 2)

    def ask(word: str):
        request = SearchRequest(query=f"kelp forests {word} {sfx}")
        return asyncio.ensure_future(search_for_key(vec_engine, ann, request, SERVICE))

    queued = [ask("one"), ask("two")]
    for _ in range(3000):  # both wait for the model (at most 30 s)
        if semantic_lane._encoding == 2:
            break
        await asyncio.sleep(0.01)
    assert semantic_lane._encoding == 2
    late = await ask("three")  # answered while the two wait
    assert late.filters["rerank"] == {
        "ran": False,
        "reason": "the query model is busy (2 query vectors wait for it)",
    }
    assert [r.id for r in late.results] == ["far", "near"]  # the fused order
    release.set()
    for answer in await asyncio.gather(*queued):
        assert answer.filters["rerank"]["ran"] is True
    assert semantic_lane._encoding == 0


async def test_a_query_no_readable_document_holds_a_word_of_buys_no_vector(vec_engine, monkeypatch):
    """Pair: with the reader's word counts current, a query none of whose words a readable
    document holds (a typo, another org's word) makes no vector ahead; one whose words are there
    makes one."""
    from app.repo import term_stats

    sfx, org = secrets.token_hex(3), "org_rrw_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))
    await term_stats.refresh_orgs(vec_engine, [org])
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    await _started(vec_engine)
    seen = _watch_encodes(monkeypatch, vec_engine)
    nothing = await search_for_key(
        vec_engine, ann, SearchRequest(query=f"zqxv glorbnak {sfx}x"), SERVICE
    )
    assert nothing.results == [] and seen == []
    found = await search_for_key(vec_engine, ann, SearchRequest(query="kelp forests"), SERVICE)
    assert found.filters["rerank"]["ran"] is True and [c for _, c in seen] == [0]


async def test_a_kept_query_vector_serves_only_the_reader_who_asked(vec_engine, monkeypatch):
    """Query vectors are kept per reader: bob asking what ann asked a moment ago encodes it
    again (a kept vector answers faster, which would tell bob what someone searched), while
    ann asking again does not."""
    sfx, org = secrets.token_hex(3), "org_rrc_" + secrets.token_hex(4)
    bob = {"kind": "user", "id": f"user_bob_{sfx}", "org": org, "handle": f"bob_{sfx}"}
    await _load(vec_engine, [*_near_and_far(org, sfx), {**bob, "role": "member"}])
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    bob = await make_key(vec_engine, f"user_bob_{sfx}")
    await _started(vec_engine)
    seen = _watch_encodes(monkeypatch, vec_engine)
    request = SearchRequest(query=f"kelp forests cold water {sfx}")
    for key in (ann, ann, bob, bob):
        got = await search_for_key(vec_engine, key, request, SERVICE)
        assert got.filters["rerank"]["ran"] is True
    assert len(seen) == 2  # once for ann, once for bob


async def test_one_memory_waiting_for_vectors_does_not_stop_vectors_made_ahead(
    vec_engine, monkeypatch
):
    """An org that keeps writing always has a memory or two waiting for the worker: a head
    short of one memory's vectors does not stop the next searches from making their vectors
    ahead (only a head mostly without vectors does, as after an import)."""
    sfx, org = secrets.token_hex(3), "org_rro_" + secrets.token_hex(4)
    records = _near_and_far(org, sfx) + [
        memory_record(org, sfx, f"more_{i}", f"More {i}", f"kelp forests note {i}")
        for i in range(3)
    ]
    await _load(vec_engine, records)
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    await import_dicts(vec_engine, [memory_record(org, sfx, "near", "Diary", "kelp forests cold")])
    await _started(vec_engine)
    seen = _watch_encodes(monkeypatch, vec_engine)
    first = await search_for_key(vec_engine, ann, SearchRequest(query=f"kelp {sfx}"), SERVICE)
    assert first.filters["rerank"]["reason"].startswith("1 of the first 5 memories")
    after = await search_for_key(vec_engine, ann, SearchRequest(query=f"forests {sfx}"), SERVICE)
    assert after.filters["rerank"]["ran"] is False
    assert [c for _, c in seen] == [0, 0]  # both made ahead, with no connection held


async def test_the_rerank_names_vectors_by_another_model_and_what_replaces_them(vec_engine):
    """Vectors by another model are never compared, and no serving process replaces them: the
    re-ranking's reason says so and names the command, rather than "not yet"."""
    sfx, org = secrets.token_hex(3), "org_rrx_" + secrets.token_hex(4)
    await _load(vec_engine, _near_and_far(org, sfx))
    ann = await make_key(vec_engine, f"user_ann_{sfx}")
    async with vec_engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE embedding_state SET model = 'other-model' "
                "WHERE org_id = :o AND memory_id = 'near'"
            ),
            {"o": org},
        )
    got = await _ask(vec_engine, ann, "kelp forests cold water", RERANK)
    assert got.filters["rerank"] == {
        "ran": False,
        "reason": "1 of the first 2 memories have no vectors by hashing: 1 have vectors by "
        "other-model, which no serving process replaces (sibyl-pg embed --model hashing)",
    }
    await embed_due(vec_engine, model_name=models.HASHING)  # the deliberate replacement
    again = await _ask(vec_engine, ann, "kelp forests cold water", RERANK)
    assert again.filters["rerank"]["ran"] is True
