"""Writes report.json, summary.md and report.html (atomically)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from validator.report.html import report_html
from validator.report.markdown import summary_md


def write_all(run_dir: Path, rep: dict, latency_values: dict | None = None) -> None:
    _atomic(run_dir / "report.json", json.dumps(rep, indent=1, default=_json_default))
    _atomic(run_dir / "summary.md", summary_md(rep))
    _atomic(run_dir / "report.html", report_html(rep, latency_values or {}))


def _json_default(o):
    if isinstance(o, float) and o != o:
        return None
    return str(o)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
