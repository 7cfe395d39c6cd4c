"""The layout says the architecture: ``core`` ← ``repo`` ← ``domain`` ← ``service`` ← adapters.

Read from the code's own imports (``ast``, every import of every module under ``app/``, those
inside functions and under ``TYPE_CHECKING`` included):

- a module imports only modules of its own layer or of the layers below it (``core``: settings,
  engine, errors, the reader, the policy table; ``repo``: every SQL statement; ``domain``: the
  rules; ``service``: units of work, authentication, the background workers, the importers;
  adapters: ``api``, ``mcp``, ``cli``, ``ui``);
- no two modules import each other, directly or through others (no import circle);
- SQL text (a ``/* sibyl:`` name comment, or SQL handed to ``text()`` or ``execute()``) lives only
  in ``app/repo``;
- the service imports nothing of the benchmark or the evaluation (``bench``, ``evaluation``: dev
  tools outside the package), checked by importing the REST app in a fresh interpreter.

Each rule is checked by a function that takes the modules' sources, so the self-checks below feed
each one a small tree that breaks it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"

LAYERS = {
    "core": 0,
    "repo": 1,
    "domain": 2,
    "service": 3,
    "importers": 3,
    "api": 4,
    "mcp": 4,
    "cli": 4,
    "ui": 4,
}
"""The rank of each package of ``app``: a module may import its own rank or a lower one."""

SQL_WORDS = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|WITH|VACUUM|ANALYZE|SET|RESET|CREATE|DROP|ALTER|TRUNCATE)\b"
)
SQL_CALLS = {"text", "execute", "exec_driver_sql", "fetch", "fetchrow", "fetchval"}
DEV_TOOLS = ("bench", "evaluation")


def module_name(path: Path, root: Path) -> str:
    """``app/repo/walk.py`` → ``app.repo.walk``; ``app/cli/__init__.py`` → ``app.cli``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def app_sources(root: Path = ROOT) -> dict[str, str]:
    """Every module under ``root/app``, by dotted name."""
    return {
        module_name(p, root): p.read_text(encoding="utf-8")
        for p in sorted((root / "app").rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def imports_of(name: str, source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports (``from a import b`` names the
    module ``a.b`` when it is one, else ``a``); relative imports resolved."""
    package = name if name in _packages(known) else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import app.repo.walk.x` → the deepest known module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _packages(known: set[str]) -> set[str]:
    return {k.rsplit(".", 1)[0] for k in known if "." in k}


def graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module → the modules of ``sources`` it imports."""
    known = set(sources)
    return {name: imports_of(name, src, known) for name, src in sources.items()}


def layer(name: str) -> int | None:
    """The rank of module ``name`` (None: ``app`` itself, which belongs to no layer)."""
    parts = name.split(".")
    if len(parts) < 2:
        return None
    if parts[1] not in LAYERS:
        raise AssertionError(f"{name}: a package of app with no layer (add it to LAYERS)")
    return LAYERS[parts[1]]


def upward_arrows(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a module of a higher layer."""
    bad = []
    for src, targets in sorted(edges.items()):
        for dst in sorted(targets):
            a, b = layer(src), layer(dst)
            if a is not None and b is not None and b > a:
                bad.append(f"{src} (layer {a}) imports {dst} (layer {b})")
    return bad


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _strings(node: ast.AST) -> list[str]:
    """The literal text of a string or f-string node (its constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        ]
    return []


def sql_outside_repo(sources: dict[str, str]) -> list[str]:
    """Each module outside ``app.repo`` holding a ``/* sibyl:`` comment in a string, or a
    ``text()`` / ``execute()`` call whose literal argument reads as SQL."""
    bad = []
    for name, source in sorted(sources.items()):
        if name == "app.repo" or name.startswith("app.repo."):
            continue
        for node in ast.walk(ast.parse(source)):
            if any("/* sibyl:" in s for s in _strings(node)):
                bad.append(f"{name}:{getattr(node, 'lineno', '?')}: a /* sibyl: statement")
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in SQL_CALLS and any(SQL_WORDS.search(s) for s in _strings(node.args[0])):
                    bad.append(f"{name}:{node.lineno}: SQL passed to {called}()")
    return sorted(set(bad))


def dev_tool_imports(sources: dict[str, str]) -> list[str]:
    """Each module outside ``app.cli`` that imports the benchmark or the evaluation (the CLI's
    ``bench`` and ``eval`` commands import them when run)."""
    bad = []
    for name, source in sorted(sources.items()):
        if name == "app.cli" or name.startswith("app.cli."):
            continue
        for node in ast.walk(ast.parse(source)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            bad += [f"{name}: imports {n}" for n in names if n.split(".")[0] in DEV_TOOLS]
    return bad


# --- the rules on the real tree ---------------------------------------------------------------


def test_no_import_runs_up_a_layer():
    assert upward_arrows(graph(app_sources())) == []


def test_no_import_circle():
    assert circles(graph(app_sources())) == []


def test_sql_text_lives_only_in_repo():
    assert sql_outside_repo(app_sources()) == []


def test_the_service_package_does_not_import_the_dev_tools():
    assert dev_tool_imports(app_sources()) == []


def test_the_rest_app_loads_nothing_of_bench_or_evaluation():
    probe = (
        "import sys, app.api.app, app.mcp.stdio\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bench', 'evaluation')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    # and the probe can see them: the same interpreter loads them when asked
    seen = subprocess.run(
        [sys.executable, "-c", probe.replace("app.mcp.stdio", "app.mcp.stdio, bench.baseline")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "bench.baseline" in seen.stdout


def test_every_package_of_app_has_a_layer():
    packages = {p.name for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS)


# --- each rule fails on a tree that breaks it -------------------------------------------------


def test_an_arrow_up_a_layer_is_found():
    edges = graph(
        {
            "app.repo.x": "from app.domain import y\n",
            "app.domain.y": "def f():\n    from app.service import z\n",
            "app.service.z": "from app.repo import x\n",
        }
    )
    assert upward_arrows(edges) == [
        "app.domain.y (layer 2) imports app.service.z (layer 3)",
        "app.repo.x (layer 1) imports app.domain.y (layer 2)",
    ]


def test_a_circle_is_found_also_through_type_checking_imports():
    edges = graph(
        {
            "app.domain.a": "from app.domain.b import B\n",
            "app.domain.b": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from app.domain.c import C\n",
            "app.domain.c": "import app.domain.a\n",
            "app.domain.d": "from app.domain import a\n",
        }
    )
    assert circles(edges) == [["app.domain.a", "app.domain.b", "app.domain.c"]]


def test_sql_outside_repo_is_found():
    found = sql_outside_repo(
        {
            "app.repo.ok": 'from sqlalchemy import text\nQ = text("/* sibyl:x */ SELECT 1")\n',
            "app.domain.named": 'Q = "/* sibyl:y */ SELECT 1"\n',
            "app.service.bare": "async def f(conn):\n"
            "    await conn.execute(text(f'SELECT count(*) FROM {t}'))\n",
            "app.cli.raw": "async def f(raw):\n    await raw.execute('VACUUM (ANALYZE) x')\n",
            "app.domain.words": 'def f(s):\n    return s.read_text("select a file")\n',
        }
    )
    assert found == [
        "app.cli.raw:2: SQL passed to execute()",
        "app.domain.named:1: a /* sibyl: statement",
        "app.service.bare:2: SQL passed to text()",
    ]


def test_an_import_of_the_dev_tools_is_found():
    found = dev_tool_imports(
        {
            "app.api.app": "from bench import baseline\n",
            "app.cli.main": "def f():\n    from evaluation import runner\n",
            "app.domain.x": "import evaluation.runner\n",
        }
    )
    assert found == ["app.api.app: imports bench", "app.domain.x: imports evaluation.runner"]
