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
    assert offenders("validator/plan", lambda m: m in ("validator.profile", "validator.inputs")
                     or m.startswith(("validator.judge", "validator.report", "validator.rundir"))) == {}


def test_only_the_launcher_starts_processes_or_handles_signals():
    """The launcher (launch.py: vLLM; procs.py: its helpers and the loadgen processes), and the guard
    that ends the server's processes when kvgate dies."""
    users = {str(p.relative_to(ROOT)) for p in modules("validator")
             if imports_of(p) & {"subprocess", "signal"}}
    assert users == {"validator/serve/launch.py", "validator/serve/procs.py", "validator/serve/guard.py"}


def test_the_pipeline_is_in_sub_packages_and_modules_stay_small():
    packages = [d.name for d in (ROOT / "validator").iterdir() if (d / "__init__.py").exists()]
    assert len(packages) >= 3 and {"plan", "serve", "observe", "judge", "report", "rundir"} <= set(packages)
    long = {str(p.relative_to(ROOT)): n for p in modules("validator") + modules("loadgen")
            if (n := len(p.read_text().splitlines())) > 320}
    assert long == {}


def test_no_empty_leftover_files_are_tracked():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    empty = [f for f in files if (ROOT / f).is_file() and (ROOT / f).stat().st_size == 0
             and not f.endswith("__init__.py")]
    assert empty == []
