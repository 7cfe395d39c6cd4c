"""``sibyl-pg bench generate`` and ``sibyl-pg bench run`` (docs/benchmark.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.defaults import (
    DEFAULT_EDGES,
    DEFAULT_ENTITIES,
    DEFAULT_ORG,
    DEFAULT_SEED,
    QUICK_EDGES,
    QUICK_ENTITIES,
)

bench_cli = typer.Typer(
    help="The benchmark: a synthetic org at scale, measured against a naive walk.",
    no_args_is_help=True,
    add_completion=False,
)

Entities = Annotated[int, typer.Option("--entities", min=200, help="Memories to generate")]
Edges = Annotated[int, typer.Option("--edges", min=0, help="Edges to generate (exactly)")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed: same seed, same graph")]
Org = Annotated[str, typer.Option("--org", help="Org id of the synthetic graph")]
Database = Annotated[
    str | None,
    typer.Option(
        "--database",
        help="Benchmark database on the DATABASE_URL server (default: sibyl_bench, or "
        "sibyl_bench_<entities>_<edges> for another size)",
    ),
]


def _database(entities: int, edges: int, seed: int, name: str | None) -> str:
    from bench.database import check_name, database_name

    if name:
        return check_name(name)
    return database_name(
        entities, edges, seed, default=(DEFAULT_ENTITIES, DEFAULT_EDGES, DEFAULT_SEED)
    )


def _echo(message: str) -> None:
    typer.echo(message, err=True)


@bench_cli.command("generate")
def generate_cmd(
    entities: Entities = DEFAULT_ENTITIES,
    edges: Edges = DEFAULT_EDGES,
    seed: Seed = DEFAULT_SEED,
    org: Org = DEFAULT_ORG,
    database: Database = None,
) -> None:
    """Generate a synthetic org into a freshly created benchmark database (COPY; prints rows/s).

    The database is dropped and recreated, migrated, loaded, re-indexed and VACUUM ANALYZEd.
    """
    from bench.generate import GraphSpec
    from bench.run import ensure_graph

    try:
        spec = GraphSpec(entities=entities, edges=edges, seed=seed, org=org)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    name = _database(entities, edges, seed, database)
    ensure_graph(spec, name, force=True, log=_echo)


@bench_cli.command("run")
def run_cmd(
    entities: Entities = DEFAULT_ENTITIES,
    edges: Edges = DEFAULT_EDGES,
    seed: Seed = DEFAULT_SEED,
    org: Org = DEFAULT_ORG,
    database: Database = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help=f"Smoke run: {QUICK_ENTITIES:,} memories / {QUICK_EDGES:,} edges (unless "
            "given), few samples, 5 s of REST load",
        ),
    ] = False,
    regenerate: Annotated[
        bool, typer.Option("--regenerate", help="Regenerate even if the graph exists")
    ] = False,
    samples: Annotated[
        int | None, typer.Option(min=3, help="Service calls per case (default 60; quick 12)")
    ] = None,
    baseline_samples: Annotated[
        int | None, typer.Option(min=1, help="Baseline calls per case (default 5; quick 3)")
    ] = None,
    baseline_timeout: Annotated[
        float, typer.Option(min=0.1, help="Statement timeout of the baseline walk, seconds")
    ] = 10.0,
    clients: Annotated[int, typer.Option(min=1, help="Concurrent REST clients")] = 16,
    load_seconds: Annotated[
        float | None, typer.Option(min=1, help="REST load duration (default 30 s; quick 5 s)")
    ] = None,
    case_seconds: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="Time budget of one measured case (service or baseline): stop there once "
            "enough calls were made (default 20 s; quick 8 s)",
        ),
    ] = None,
    skip_rest: Annotated[bool, typer.Option("--skip-rest", help="Skip the REST load")] = False,
    rest_only: Annotated[
        bool,
        typer.Option(
            "--rest-only",
            help="Only the REST cases (one client, then --clients clients): the serving path",
        ),
    ] = False,
    out: Annotated[Path, typer.Option(help="Folder for results.json and latency.png")] = Path(
        "bench-results"
    ),
    graph: Annotated[
        str,
        typer.Option(
            "--graph",
            help="synthetic: the generated org (--entities, --edges, --seed); debian: Debian "
            "bookworm's package index from apt's lists (database sibyl_bench_debian)",
        ),
    ] = "synthetic",
) -> None:
    """Measure expand (depth 1-3, random and hub seeds), fetch_slice and search against the
    baseline walk, then REST under concurrency; write results.json, latency.png and a table.

    The graph is generated first when its database does not hold it.
    """
    from bench.generate import GraphSpec
    from bench.run import RunOptions, run_benchmark

    if graph not in ("synthetic", "debian"):
        raise typer.BadParameter("--graph must be synthetic or debian")
    if graph == "debian" and database is None:
        from bench.debian import DEBIAN_DATABASE

        database = DEBIAN_DATABASE
    if quick and (entities, edges) == (DEFAULT_ENTITIES, DEFAULT_EDGES):
        entities, edges = QUICK_ENTITIES, QUICK_EDGES
    try:
        spec = GraphSpec(entities=entities, edges=edges, seed=seed, org=org)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    options = RunOptions(
        database=_database(entities, edges, seed, database),
        regenerate=regenerate,
        samples=samples or (12 if quick else 60),
        baseline_samples=baseline_samples or (3 if quick else 5),
        baseline_timeout_s=baseline_timeout,
        clients=clients,
        load_seconds=load_seconds or (5.0 if quick else 30.0),
        rest=not skip_rest,
        rest_only=rest_only,
        out=out,
        quick=quick,
        case_seconds=case_seconds or (8.0 if quick else 20.0),
        baseline_case_seconds=case_seconds or (8.0 if quick else 20.0),
        graph=graph,
        rest_case_seconds=2.0 if quick else 5.0,
    )
    from bench.debian import DebianListMissing

    try:
        run_benchmark(spec, options, log=_echo)
    except DebianListMissing as exc:
        _echo(str(exc))
        raise typer.Exit(1) from None


@bench_cli.command("search")
def search_cmd(
    entities: Entities = DEFAULT_ENTITIES,
    edges: Edges = DEFAULT_EDGES,
    seed: Seed = DEFAULT_SEED,
    org: Org = DEFAULT_ORG,
    database: Database = None,
    quick: Annotated[
        bool, typer.Option("--quick", help=f"Smoke run on {QUICK_ENTITIES:,} memories")
    ] = False,
    samples: Annotated[int, typer.Option(min=3, help="Calls per case")] = 40,
    out: Annotated[Path, typer.Option(help="Folder for search.json")] = Path("bench-results"),
) -> None:
    """Search's own targets (docs/benchmark.md): the semantic lane on the benchmark graph
    (where the server has pgvector), its exactness for a reader restricted to one project, and
    one LoCoMo question end to end over REST."""
    from app.core.settings import get_settings
    from bench import search_bench
    from bench.generate import PROJECTS, GraphSpec, reader_ids
    from bench.run import ensure_graph

    if quick and (entities, edges) == (DEFAULT_ENTITIES, DEFAULT_EDGES):
        entities, edges = QUICK_ENTITIES, QUICK_EDGES
    spec = GraphSpec(entities=entities, edges=edges, seed=seed, org=org)
    name = _database(entities, edges, seed, database)
    summary = ensure_graph(spec, name, force=False, log=_echo)
    from bench.database import bench_url

    url = bench_url(name)
    results: dict[str, object] = {"graph": spec.as_dict()}
    import asyncio

    if asyncio.run(search_bench.ensure_vectors(url, spec.org, _echo)):
        private = [f"proj_{p}" for p, visibility, _ in PROJECTS if visibility == "private"]
        reader = reader_ids(spec)[0]
        results["semantic"] = asyncio.run(
            search_bench.measure_semantic(url, spec.org, reader, private[0], samples, _echo)
        )
    else:
        _echo("semantic: the server has no pgvector (run on the embedded server)")
        results["semantic"] = None
    results["locomo_rest"] = search_bench.measure_locomo_rest(
        url, get_settings().locomo_dir, _echo, out
    )
    _echo(f"written to {search_bench.write(results, out)}")
    del summary


@bench_cli.command("import")
def import_cmd(
    quick: Annotated[
        bool, typer.Option("--quick", help="Smoke run: a graph of 7k lines instead of 357k")
    ] = False,
    seed: Seed = 13,
    keep: Annotated[
        Path | None, typer.Option(help="Write the generated NDJSON here and keep it")
    ] = None,
    database: Annotated[
        str,
        typer.Option(
            "--database", help="The database to recreate and import into (on DATABASE_URL)"
        ),
    ] = "sibyl_bench_import",
) -> None:
    """Generate an NDJSON graph the size and shape of Debian's package index (63k memories,
    283k edges, a hub with 22k in-edges, 58 projects, 8k memberships: 357k lines), import it
    into a fresh database and report lines/s (target: 10,000 on 2 cores) and each part's time."""
    import asyncio
    import tempfile

    from bench import import_bench
    from bench.database import check_name

    shape = import_bench.QUICK if quick else import_bench.FULL
    with tempfile.TemporaryDirectory() as folder:
        path = keep or Path(folder) / "graph.ndjson"
        lines = import_bench.write(path, shape, seed=seed)
        _echo(f"generated {lines:,} lines in {path}")
        report = asyncio.run(import_bench.run(path, lines, database=check_name(database)))
    typer.echo(report.render())


@bench_cli.command("debian")
def debian_cmd(
    packages: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="A Debian Packages file (text)")
    ],
    out: Annotated[Path, typer.Argument(dir_okay=False, help="The NDJSON file to write")],
) -> None:
    """Turn a Debian package index into an import file (a memory per package, an edge per
    relationship; Replaces as SUPERSEDES, whose mutual pairs close cycles): the real graph the
    import benchmark imitates. Import it with ``sibyl-pg import OUT --on-error skip``."""
    from bench.debian_import import convert

    _echo(f"wrote {convert(packages, out):,} lines to {out}")
