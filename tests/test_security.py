"""No shell anywhere; loopback by default."""

import re
from pathlib import Path

import pytest

from validator.serve.argv import LaunchSpec

ROOT = Path(__file__).resolve().parents[1]
SHELLS = re.compile(
    r"shell\s*=\s*True|os\.system\(|os\.popen\(|subprocess\.getoutput|subprocess\.getstatusoutput"
    r"|create_subprocess_shell"
)


@pytest.mark.parametrize("folder", ["validator", "loadgen", "benchmarks", "scripts"])
def test_no_shell_in_the_code(folder):
    for f in (ROOT / folder).rglob("*.py"):
        assert not SHELLS.search(f.read_text()), f


def test_launcher_argv_is_a_list_and_binds_loopback_by_default():
    spec = LaunchSpec(
        model="/m",
        served_name="x",
        vllm_args=["--max-model-len", "512"],
        extra_args=["--enforce-eager", "--chat-template", "a b; rm -rf /"],
        api_key="secret",
    )
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


def _tiny(**changes):
    """profiles/tiny-cpu.yaml (a config.json only: nothing is built or launched) with changes."""
    import yaml

    from validator.inputs import plan_input_from_profile
    from validator.plan.limits import make_plan
    from validator.profile import from_dict

    raw = yaml.safe_load((ROOT / "profiles" / "tiny-cpu.yaml").read_text())
    raw["model"] = {"path": str(ROOT / "profiles" / "models" / "qwen3-8b"), "served_name": "tiny"}
    raw["hardware"] = {"platform": "gpu", "gpu_memory": "80GiB"}
    raw["cache"] = {"kv_cache_bytes": "1GiB", "block_size": 16}
    for dotted, v in changes.items():
        sec, key = dotted.split("__")
        raw.setdefault(sec, {})[key] = v
    prof = from_dict(raw, ROOT / "profiles" / "x.yaml")
    return prof, make_plan(plan_input_from_profile(prof))


@pytest.mark.parametrize(
    "args,field",
    [
        (["--max_model_len", "4096"], "limits.max_model_len"),
        (["--num_gpu_blocks_override=4096"], "cache.num_gpu_blocks_override"),
        (["--max-num-seqs=64"], "limits.max_num_seqs"),
        (["--kv_cache_memory_bytes", "1"], "cache.kv_cache_bytes"),
    ],
)
def test_owned_flags_are_refused_in_every_spelling_naming_the_field(args, field):
    from validator.errors import InputError
    from validator.serve.owned import validate_extra_args

    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        validate_extra_args(args)


def test_a_config_file_cannot_smuggle_flags_past_the_plan():
    from validator.errors import InputError
    from validator.serve.owned import validate_extra_args

    for args in (["--config", "f.yaml"], ["--config=f.yaml"]):
        with pytest.raises(InputError, match="--config"):
            validate_extra_args(args)
    validate_extra_args(["--enforce-eager", "--max-logprobs", "5"])  # others pass


@pytest.mark.parametrize(
    "var,field",
    [
        ("VLLM_CPU_KVCACHE_SPACE", "cache.kv_cache_bytes"),
        ("VLLM_SERVER_DEV_MODE", "observe.freezes"),
        ("VLLM_CPU_OMP_THREADS_BIND", "vllm.cpus"),
    ],
)
def test_environment_variables_that_set_owned_values_are_refused_naming_the_field(var, field):
    from validator.errors import InputError
    from validator.serve.argv import launch_spec

    prof, plan = _tiny(vllm__env={var: "2"})
    with pytest.raises(InputError, match=rf"vllm\.env: {var}.*{field.replace('.', '[.]')}"):
        launch_spec(prof, plan)


def test_owned_variables_inherited_from_the_shell_do_not_reach_the_server():
    """A VLLM_SERVER_DEV_MODE=1 or a KV size left in the caller's shell must not change the server."""
    from validator.serve.owned import launch_environment

    env = launch_environment(
        {"PATH": "/bin", "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "8", "VLLM_API_KEY": "sk-shell"},
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    assert env == {
        "PATH": "/bin",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "NO_COLOR": "1",
        "VLLM_LOGGING_COLOR": "0",
    }


def test_an_api_key_in_vllm_env_is_refused_and_secrets_never_reach_profile_json():
    from validator.errors import InputError
    from validator.rundir.files import redacted
    from validator.serve.argv import launch_spec

    prof, plan = _tiny(vllm__env={"VLLM_API_KEY": "sk-123"})
    with pytest.raises(InputError, match="vllm.api_key_env"):
        launch_spec(prof, plan)
    prof, _ = _tiny(vllm__env={"HF_TOKEN": "hf-secret", "OMP_NUM_THREADS": "2"})
    saved = redacted(prof.values)
    assert saved["vllm"]["env"] == {"HF_TOKEN": "<redacted>", "OMP_NUM_THREADS": "2"}
    assert prof.values["vllm"]["env"]["HF_TOKEN"] == "hf-secret"  # the server still gets it


def test_dev_mode_only_when_freezes_want_it_and_only_on_loopback():
    from validator.errors import InputError
    from validator.serve.argv import launch_spec

    prof, plan = _tiny()
    assert launch_spec(prof, plan).env["VLLM_SERVER_DEV_MODE"] == "1"
    prof, plan = _tiny(vllm__host="0.0.0.0")
    with pytest.raises(InputError, match="vllm.host"):
        launch_spec(prof, plan)
    prof, plan = _tiny(vllm__host="0.0.0.0", observe__freezes=False)
    assert "VLLM_SERVER_DEV_MODE" not in launch_spec(prof, plan).env  # no freezes: no dev mode


def test_run_directories_stay_inside_runs_and_never_mix(tmp_path):

    from validator.errors import InputError
    from validator.rundir.files import run_dir_for, safe_name

    for name in ("../../../somewhere", "a/b\\c", ".hidden", "/etc/passwd"):
        clean = safe_name(name)
        assert "/" not in clean and "\\" not in clean and not clean.startswith("."), clean
    prof, _ = _tiny()
    prof.values[""]["name"] = "../../../somewhere"
    d = run_dir_for(None, prof.name)
    assert d.parent == Path("runs") and ".." not in d.parts
    used = tmp_path / "used"
    used.mkdir()
    (used / "records.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match="--out"):
        run_dir_for(str(used), prof.name)
    assert run_dir_for(str(tmp_path / "new"), prof.name) == tmp_path / "new"
