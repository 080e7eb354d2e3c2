"""No shell anywhere; loopback by default."""

import re
from pathlib import Path

import pytest

from validator.launch import LaunchSpec

ROOT = Path(__file__).resolve().parents[1]
SHELLS = re.compile(r"shell\s*=\s*True|os\.system\(|os\.popen\(|subprocess\.getoutput|subprocess\.getstatusoutput"
                    r"|create_subprocess_shell")


@pytest.mark.parametrize("folder", ["validator", "loadgen", "benchmarks", "scripts"])
def test_no_shell_in_the_code(folder):
    for f in (ROOT / folder).rglob("*.py"):
        assert not SHELLS.search(f.read_text()), f


def test_launcher_argv_is_a_list_and_binds_loopback_by_default():
    spec = LaunchSpec(model="/m", served_name="x", vllm_args=["--max-model-len", "512"],
                      extra_args=["--enforce-eager", "--chat-template", "a b; rm -rf /"], api_key="secret")
    argv = spec.argv(8000)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "a b; rm -rf /" in argv  # one argv word, never interpreted by a shell
    assert "secret" not in " ".join(argv)  # the key travels in the environment only


def test_every_reliability_row_names_a_test_that_exists():
    doc = (ROOT / "docs" / "reliability.md").read_text()
    refs = set(re.findall(r"`(test_\w+\.py)(?:::(\w+))?", doc))
    assert len(refs) >= 15
    for f, name in refs:
        text = (ROOT / "tests" / f).read_text()
        if name:
            assert f"def {name}(" in text, (f, name)
