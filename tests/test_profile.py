"""Profiles: validation at load, size parsing, documentation in step with the schema."""

from pathlib import Path

import pytest

from validator.errors import InputError
from validator.profile import SCHEMA, from_dict, load
from validator.units import GiB, parse_bytes

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("22GiB", 22 * GiB),
        ("80GB", 80_000_000_000),
        ("512 MiB", 512 << 20),
        ("3.35TB", 3_350_000_000_000),
        (1024, 1024),
        ("1024", 1024),
    ],
)
def test_sizes(text, expected):
    assert parse_bytes(text, "x") == expected


@pytest.mark.parametrize("bad", ["-1GiB", "lots", "1XB", True, [1], -5])
def test_bad_sizes_name_the_field(bad):
    with pytest.raises(InputError, match="^cache.kv_cache_bytes: "):
        from_dict({"cache": {"kv_cache_bytes": bad}})


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"modle": {}}, "unknown key 'modle'"),
        ({"cache": {"blok_size": 16}}, "cache.blok_size: unknown field"),
        ({"cache": {"block_size": "16"}}, "cache.block_size: expected a whole number"),
        ({"cache": {"block_size": 0}}, "cache.block_size: must be at least 1"),
        ({"hardware": {"gpu_memory_utilization": 1.5}}, "hardware.gpu_memory_utilization: must be at most 1"),
        ({"hardware": {"platform": "tpu"}}, "hardware.platform: 'tpu' is not one of cpu, gpu"),
        ({"vllm": {"extra_args": "--enforce-eager"}}, "vllm.extra_args: expected a list of strings"),
        ({"cache": 5}, "cache: expected a mapping"),
        ([1, 2], "profile: the top level must be a mapping"),
    ],
)
def test_errors_name_the_field_and_the_fix(raw, message):
    with pytest.raises(InputError) as e:
        from_dict(raw)
    assert message in str(e.value)


def test_defaults_are_filled():
    p = from_dict({})
    assert p.hardware.gpu_memory_utilization == 0.92
    assert p.cache.workspace is None  # modelled per vLLM version unless given
    assert p.vllm.host == "127.0.0.1"
    assert p.limits.max_model_len is None  # derived later, never 0


def test_shipped_profiles_load():
    for f in (ROOT / "profiles").glob("*.yaml"):
        p = load(f)
        assert Path(p.model.path).is_absolute()


def test_every_field_is_documented():
    doc = (ROOT / "docs" / "profiles.md").read_text()
    for section, fields in SCHEMA.items():
        for key in fields:
            name = f"{section}.{key}" if section else key
            assert f"`{name}`" in doc, name


def test_bad_yaml_is_one_line(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("model: [unclosed\n")
    with pytest.raises(InputError, match="is not valid YAML"):
        load(f)


def test_cpus_are_a_linux_cpu_list_that_leaves_kvgate_a_cpu(monkeypatch):
    import os

    from validator.cpulist import parse_cpus

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert parse_cpus("0", "vllm.cpus") == "0"
    assert parse_cpus("3-5, 0,1", "vllm.cpus") == "0-1,3-5"
    assert parse_cpus(2, "vllm.cpus") == "2"
    for bad, why in (
        ("8", "not available"),
        ("0-7", "leave at least one"),
        ("a", "not a CPU"),
        ("3-1", "not a CPU"),
        ("", "expected a CPU list"),
        (True, "expected a CPU list"),
    ):
        with pytest.raises(InputError, match=why):
            parse_cpus(bad, "vllm.cpus")
