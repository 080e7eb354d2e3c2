"""The layout holds: imports follow the pipeline's layers (read from the source with ast, so a
stray import anywhere in a module, lazy ones included, is caught)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NETWORK_OR_PROCESS = {"aiohttp", "urllib", "http", "requests", "socket", "subprocess", "signal", "psutil"}


def imports_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def offenders(folder: str, banned) -> dict[str, list[str]]:
    bad = {}
    for p in modules(folder):
        hits = sorted(m for m in imports_of(p) if banned(m))
        if hits:
            bad[str(p.relative_to(ROOT))] = hits
    return bad


def test_loadgen_never_imports_validator():
    assert offenders("loadgen", lambda m: m.split(".")[0] == "validator") == {}


def test_planner_judge_rundir_and_report_do_no_io_of_their_own():
    """No HTTP client, process or signal module, and nothing from the serving or observing stages."""

    def banned(m: str) -> bool:
        return m.split(".")[0] in NETWORK_OR_PROCESS or m.startswith(("validator.serve", "validator.observe"))

    for folder in ("validator/plan", "validator/judge", "validator/rundir", "validator/report"):
        assert offenders(folder, banned) == {}, folder


def test_the_planner_reads_no_profile_and_knows_no_vllm_flags():
    assert (
        offenders(
            "validator/plan",
            lambda m: (
                m in ("validator.profile", "validator.inputs")
                or m.startswith(("validator.judge", "validator.report", "validator.rundir"))
            ),
        )
        == {}
    )


def test_only_the_launcher_starts_processes_or_handles_signals():
    """The launcher (launch.py: vLLM; procs.py: its helpers and the loadgen processes), and the guard
    that ends the server's processes when kvgate dies."""
    users = {str(p.relative_to(ROOT)) for p in modules("validator") if imports_of(p) & {"subprocess", "signal"}}
    assert users == {"validator/serve/launch.py", "validator/serve/procs.py", "validator/serve/guard.py"}


def test_the_pipeline_is_in_sub_packages_and_modules_stay_small():
    packages = [d.name for d in (ROOT / "validator").iterdir() if (d / "__init__.py").exists()]
    assert len(packages) >= 3 and {"plan", "serve", "observe", "judge", "report", "rundir"} <= set(packages)
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules("validator") + modules("loadgen")
        if (n := len(p.read_text().splitlines())) > 320
    }
    assert long == {}


def test_no_empty_leftover_files_are_tracked():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    empty = [
        f for f in files if (ROOT / f).is_file() and (ROOT / f).stat().st_size == 0 and not f.endswith("__init__.py")
    ]
    assert empty == []


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of validator/ and loadgen/ and the modules of theirs it imports (lazy imports
    inside functions included), resolved to modules (an import of a package names its __init__)."""
    mods = {module_name(p): p for folder in ("validator", "loadgen") for p in modules(folder)}
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            deps |= {t for t in targets if t in mods and t != name}
        graph[name] = deps
    return graph


def test_no_import_cycle_anywhere():
    graph = import_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d) :] + [d]
                # a package's __init__ that re-exports its own modules is not a cycle of code
                if not all(x.startswith(cycle[0] + ".") for x in cycle[1:-1]):
                    raise AssertionError("import cycle: " + " -> ".join(cycle))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert len(graph) > 60


# loadgen's rooms, from the bottom up: a room imports only from rooms below it (and itself)
LOADGEN_ROOMS = [
    (
        "infra",
        (
            "loadgen",
            "loadgen.net",
            "loadgen.lifeline",
            "loadgen.safefile",
            "loadgen.redaction",
            "loadgen.loadrun",
            "loadgen.dataset_options",
            "loadgen.eventloop",
        ),
    ),
    ("results", ("loadgen.results",)),
    ("transport", ("loadgen.transport",)),
    ("schedule", ("loadgen.schedule",)),
    ("sources", ("loadgen.sources",)),
    ("shard", ("loadgen.shard", "loadgen.cli", "loadgen.cli_datasets")),
    ("scale", ("loadgen.scale",)),
    ("main", ("loadgen.main", "loadgen.__main__")),
]


def room_of(module: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(LOADGEN_ROOMS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) >= best[1]):
                best = (i, len(p))
    assert best is not None, module
    return best[0]


def test_loadgen_rooms_import_only_downwards():
    """transport/ sends one request; schedule/ decides what and when; results/ keeps what came back;
    shard.py runs one shard, cli.py only parses; scale/ runs several; main.py is the entry point.
    results/ may not reach up to transport/ or schedule/, nor transport/ to schedule/, and so on."""
    graph = import_graph()
    upward = {}
    for m, deps in graph.items():
        if not m.startswith("loadgen"):
            continue
        bad = sorted(d for d in deps if room_of(d) > room_of(m))
        if bad:
            upward[m] = bad
    assert upward == {}


def test_no_string_key_reads_of_the_plan_outside_rundir_and_report():
    """The plan travels as a typed PlanRecord; only rundir/ and report/ (JSON at the edges) and the
    record's own module read plan.json's keys."""
    import re

    pattern = re.compile(r"\b(plan|record)\[\"|\b(plan|record)\.get\(\"")
    offenders = []
    for p in modules("validator"):
        rel = str(p.relative_to(ROOT))
        if rel.startswith(("validator/rundir/", "validator/report/")) or rel == "validator/plan/record.py":
            continue
        offenders += [f"{rel}:{i}" for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_no_branch_on_a_literal_sentence():
    """Kinds are enums, reasons are typed: no `== "...a sentence..."` or `"..." in reason` on prose."""
    import re

    prose = re.compile(r"""(==|!=)\s*["'][^"'\n]*\s[^"'\n]*["']|["'][^"'\n]*\s[^"'\n]*["']\s+(not\s+)?in\s+[\w.]""")
    assert prose.search('if L.get("mode") == "kv_cache_bytes given":')  # what it is for
    assert prose.search('if not any("one sequence" in r for r in reasons):')
    offenders = []
    for p in modules("validator") + modules("loadgen"):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if prose.search(line.split("#", 1)[0]):
                offenders.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert offenders == []
