"""The quality A/B's comparison (validator/judge/quality.py) and prompt set, on generations built
here: every check can fail, a control that does not repeat itself stops the A/B being judged,
and missing logprobs are "not measured", never a pass."""

from __future__ import annotations

import json

import pytest

from validator.errors import InputError
from validator.judge.quality import Generation, compare, figures, quality_checks
from validator.observe.quality import prompts_from_file
from validator.profile import from_dict
from validator.quality.prompts import TaskKind, build, builtin_tasks

Q = from_dict({"quality": {"candidate_kv_cache_dtype": "fp8"}}).quality


def gen(pid, tokens, lps=None, top=None, text="", error=None):
    return Generation(
        id=pid,
        tokens=tuple(tokens),
        logprobs=tuple(lps) if lps is not None else None,
        top=tuple(top) if top is not None else None,
        text=text,
        prompt_tokens=100,
        error=error,
    )


def test_identical_outputs_compare_every_position():
    p = compare(gen("a", "xyz", [-1.0, -2.0, -3.0]), gen("a", "xyz", [-1.1, -2.0, -2.5]))
    assert (p.identical, p.first_divergence, p.agreed, p.compared) == (True, None, 3, 3)
    assert p.abs_deltas == pytest.approx((0.1, 0.0, 0.5))


def test_the_first_divergence_is_compared_and_nothing_after_it():
    a = gen("a", "abcd", [-1.0, -1.0, -1.0, -1.0])
    b = gen("a", "abXY", [-1.0, -1.2, -0.5, -9.0], top=[{}, {}, {"X": -0.5, "c": -1.25}, {}])
    p = compare(a, b)
    assert (p.identical, p.first_divergence, p.agreed, p.compared) == (False, 2, 2, 3)
    # positions 0, 1 (same token), and 2: the reference token "c" in the candidate's top logprobs
    assert p.abs_deltas == pytest.approx((0.0, 0.2, 0.25))


def test_one_output_stopping_early_is_a_divergence():
    p = compare(gen("a", "abc", [-1, -1, -1]), gen("a", "ab", [-1, -1]))
    assert (p.identical, p.first_divergence, p.agreed, p.compared) == (False, 2, 2, 2)


PROMPTS = [{"id": str(i), "kind": "retrieval", "answer": "42"} for i in range(4)]


def runs(delta=0.05, control_change=False, logprobs=True, diverge=False):
    ref = [gen(str(i), "abcd", [-1.0] * 4 if logprobs else None, text=" 42.") for i in range(4)]
    ctl = [
        gen(str(i), "abcd" if not (control_change and i == 3) else "abcz", [-1.0] * 4 if logprobs else None)
        for i in range(4)
    ]
    cand = [
        gen(
            str(i),
            "abXd" if diverge and i == 0 else "abcd",
            [-1.0 - delta] * 4 if logprobs else None,
            text=" 42." if i else " 7",
        )
        for i in range(4)
    ]
    return ref, ctl, cand


def checks_of(**kw):
    f = figures(PROMPTS, *runs(**kw))
    return f, {c.name: c for c in quality_checks(f, Q, "fp8")}


def test_a_clean_ab_passes_and_reports_its_figures():
    f, c = checks_of()
    assert f.control_identical and f.ab_exact_match == 1.0 and f.top1_agreement == 1.0
    assert f.mean_abs_logprob_delta == pytest.approx(0.05)
    assert f.accuracy("reference") == 1.0 and f.accuracy("candidate") == 0.75
    assert c["quality.control"].passed and c["quality.mean_abs_logprob_delta"].passed
    assert c["quality.answer_accuracy_drop"].passed is False  # 0.25 lost > 0.1 allowed


def test_each_ab_check_fails_on_a_doctored_observation():
    _, c = checks_of(delta=0.3)
    assert c["quality.mean_abs_logprob_delta"].passed is False
    _, c = checks_of(diverge=True)
    assert c["quality.top1_agreement"].observed == pytest.approx(14 / 15)  # 2 of 3 at prompt 0, 4 x 3 others
    assert c["quality.top1_agreement"].passed is False  # < 0.98
    assert c["quality.ab_exact_match"].observed == 0.75 and c["quality.ab_exact_match"].passed is False


def test_a_control_that_does_not_repeat_itself_stops_the_ab():
    _, c = checks_of(control_change=True)
    assert c["quality.control"].passed is False and "first at token 3" in c["quality.control"].explanation
    for name in ("quality.ab_exact_match", "quality.top1_agreement", "quality.mean_abs_logprob_delta"):
        assert c[name].status.value == "not_judged" and "could be noise" in c[name].explanation


def test_no_logprobs_is_not_measured_never_a_pass():
    _, c = checks_of(logprobs=False)
    assert c["quality.mean_abs_logprob_delta"].status.value == "not_measured"
    assert "no logprobs" in c["quality.mean_abs_logprob_delta"].explanation


def test_a_prompt_missing_from_a_run_is_said():
    ref, ctl, cand = runs()
    f = figures(PROMPTS, ref, ctl, cand[:3] + [gen("3", "", error="HTTP 500")])
    assert f.missing == ("3",) and len(f.prompts) == 3


def test_the_builtin_set_plants_its_answers():
    tasks = builtin_tasks()
    assert [t.kind for t in tasks].count(TaskKind.RETRIEVAL) == 9 and len(tasks) == 15
    r = build(tasks[2], 200)  # depth 0.9
    assert r.answer and r.text.index(f"pass key is {r.answer}") > 0.8 * len(r.text.split("\n")[0])
    assert build(tasks[2], 200) == r  # deterministic
    a = build(next(t for t in tasks if t.kind is TaskKind.ARITHMETIC), 10)
    *_, last = a.text.split("Compute: ")[1].split(". ")
    x, y = last.rstrip(" =").split(" + ")
    assert int(a.answer) == int(x) + int(y)


def test_a_prompt_file_is_read_or_refused_by_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": "hi", "answer": 3}) + "\n\n" + json.dumps({"prompt": "yo", "id": "b"}) + "\n")
    got = prompts_from_file(f)
    assert [(p.id, p.answer) for p in got] == [("line-1", "3"), ("b", None)]
    f.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    with pytest.raises(InputError, match='line 2 of .* has no "prompt" string'):
        prompts_from_file(f)


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--quality", "--url", "http://127.0.0.1:9"), "--quality: the A/B launches vLLM twice"),
        (("--quality", "--sweep", "1,2"), "--quality: the A/B replaces the load runs"),
        (("--quality", "fp9"), "quality.candidate_kv_cache_dtype: 'fp9' is not one of fp8, fp8_e4m3, fp8_e5m2"),
        (("--quality", "--kv-cache-dtype", "fp8"), "the same as cache.kv_cache_dtype"),
        (("--quality", "fp8_e4m3", "--kv-cache-dtype", "fp8"), "the same as cache.kv_cache_dtype"),
    ],
)
def test_bad_quality_requests_are_one_line_errors(args, needle, tmp_path):
    from tests.conftest import run_validate

    r = run_validate("--profile", "profiles/tiny-cpu.yaml", "--out", str(tmp_path / "run"), *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_an_ab_too_large_to_hold_is_refused(tmp_path):
    """The three runs' generations are held until judged: more than a million logprob entries a run
    is refused before anything starts."""
    import yaml

    from tests.conftest import ROOT, run_validate

    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(500)))
    p = yaml.safe_load((ROOT / "profiles" / "tiny-cpu.yaml").read_text())
    p["model"]["path"] = str(ROOT / "models" / "tiny-gqa")
    p["quality"] = {"candidate_kv_cache_dtype": "fp8", "dataset_path": str(f), "max_tokens": 400, "logprobs": 20}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(p))
    r = run_validate("--profile", str(tmp_path / "q.yaml"), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "quality: 500 prompts x 400 tokens x 21 logprobs" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()
