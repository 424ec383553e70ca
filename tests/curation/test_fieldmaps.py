"""Field maps: the format, paths, parsers, extractors, test-case conversion, and clear errors."""

from __future__ import annotations

import pytest

from curation.errors import ConfigError, NotFoundError
from curation.fieldmaps import (
    FieldError,
    available_maps,
    convert_tests,
    extract_boxed,
    load_map,
    parse_path,
    resolve,
)

# Pools in /work/shared/pools (see its PROVENANCE.md) must each have a map; PROVENANCE names.
REQUIRED_MAPS = {
    "deepscaler_aime",
    "deepscaler_math",
    "deepscaler_verl",
    "oneshotrlvr_verl",
    "simplerl_math8k",
    "limr",
    "gsm8k",
    "ttrl",
    "leetcodedataset",
    "deepcoder_leetcode",
    "deepcoder_codeforces",
    "deepcoder_code_contests",
    "math500",
    "marco_o1_sft",
    "hub_deepscaler_preview",
    "hub_skywork_or1_math",
    "hub_numinamath_cot",
    "hub_openr1_math",
    "hub_taco",
    "hub_apps",
    "hub_code_contests",
}


def test_every_required_map_ships_and_says_where_it_was_tested():
    assert REQUIRED_MAPS <= set(available_maps())
    for name in available_maps():
        m = load_map(name)
        assert m.tested_on or m.hub or name.startswith("generic_"), name
        if name.startswith("hub_"):
            assert not m.tested_on and m.hub.startswith("hf://"), name


def test_paths_resolve_into_nested_and_stringified_values():
    row = {
        "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        "meta": "{'question_id': 7, 'difficulty': 'Hard'}",  # Python repr, as LeetCodeDataset ships it
        "reward_model": {"ground_truth": "42"},
    }
    assert parse_path("prompt[-1].content") == ("prompt", -1, "content")
    assert resolve(row, parse_path("prompt[0].content")) == "s"
    assert resolve(row, parse_path("prompt[-1].content")) == "u"
    assert resolve(row, parse_path("meta.difficulty")) == "Hard"
    assert resolve(row, parse_path("reward_model.ground_truth")) == "42"
    with pytest.raises(ConfigError, match="cannot parse field path"):
        parse_path("[0].x")


def test_auto_parse_leaves_bare_scalars_as_text():
    from curation.fieldmaps import parse_value

    assert parse_value("0.50", "auto", "answer") == "0.50"
    assert parse_value("'Easy'", "auto", "x") == "Easy"
    assert parse_value('["5"]', "auto", "x") == ["5"]
    assert parse_value("{'a': (1, 2)}", "auto", "x") == {"a": (1, 2)}
    assert parse_value("[not, parseable", "auto", "x") == "[not, parseable"
    with pytest.raises(FieldError, match="not a Python literal"):
        parse_value("Easy", "python", "x")


def test_extractors():
    assert extract_boxed(r"so $\boxed{\frac{1}{2}}$ and finally \boxed{x^{2}+1}.") == "x^{2}+1"
    assert extract_boxed("no box") is None
    m = load_map("gsm8k")
    row = {"question": "q?", "answer": "3 * 400 = <<3*400=1200>>1200\n#### 1,200"}
    assert m.apply(row)["answer"] == "1200"
    assert m.apply(row)["solutions"] == [row["answer"]]


def test_convert_tests_shapes():
    assert convert_tests({"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]}) == [
        {"kind": "stdin", "input": "1\n", "output": "2\n", "entry_point": None},
        {"kind": "stdin", "input": "2\n", "output": "4\n", "entry_point": None},
    ]
    assert convert_tests('{"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"}') == [
        {"kind": "functional", "input": "[1, 2]", "output": "3", "entry_point": "add"}
    ]
    assert convert_tests({"input": ["a"], "output": ["b"]}, "stdin") == [
        {"kind": "stdin", "input": "a", "output": "b", "entry_point": None}
    ]
    assert convert_tests("[{'input': 'x', 'output': 'y'}]") == [
        {"kind": "stdin", "input": "x", "output": "y", "entry_point": None}
    ]
    code = "def check(candidate):\n    assert candidate(1) == 2\n\n\ncheck(Solution().inc)"
    assert convert_tests({"functional": code}) == [
        {"kind": "functional", "input": code, "output": None, "entry_point": "Solution().inc"}
    ]
    with pytest.raises(FieldError, match="differ in length"):
        convert_tests({"inputs": ["1"], "outputs": []})
    with pytest.raises(FieldError, match="unsupported test format"):
        convert_tests({"cases": []})


def _write_map(tmp_path, text):
    p = tmp_path / "my.toml"
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_custom_map_from_a_path(tmp_path):
    m = load_map(
        _write_map(
            tmp_path,
            """
[map]
domain = "math"
source = "mine"
required = ["answer"]

[fields]
problem = { path = "q", strip_prefix = "Q:" }
answer = { path = ["a", "sol"], extract = "boxed" }
source_id = "n"

[metadata]
level = { path = "info", parse = "json" }
""",
        )
    )
    rec = m.apply({"q": "Q: What is 1+1?", "sol": r"\boxed{2}", "n": 9, "info": '{"lvl": 1}'})
    assert rec["problem"] == "What is 1+1?"
    assert rec["answer"] == "2" and rec["source_id"] == "9"
    assert rec["metadata"] == {"level": {"lvl": 1}}
    with pytest.raises(FieldError) as exc:
        m.apply({"q": "What?", "a": "no box", "n": 1, "info": "{}"})
    assert exc.value.field == "answer"
    with pytest.raises(FieldError, match="not valid JSON") as exc:
        m.apply({"q": "What?", "a": r"\boxed{1}", "n": 1, "info": "{oops"})
    assert exc.value.field == "metadata.level"


@pytest.mark.parametrize(
    "body, message",
    [
        ('[map]\ndomain="math"\nsource="s"\n[fields]\nproblme="q"\n', "did you mean 'problem'"),
        (
            '[map]\ndomain="math"\nsource="s"\n[fields]\nproblem={path="q", strip="x"}\n',
            "unknown key",
        ),
        ('[map]\ndomain="bio"\nsource="s"\n[fields]\nproblem="q"\n', "domain must be one of"),
        ('[map]\ndomain="math"\nsource="s"\n[fields]\nanswer="a"\n', "must map 'problem'"),
        (
            '[map]\ndomain="math"\nsource="s"\n[fields]\nproblem={path="q", extract="magic"}\n',
            "unknown extractor",
        ),
        ("[map\n", "not valid TOML"),
        (
            '[map]\ndomain="math"\nsource="s"\n[fields]\nproblem="q"\n'
            'answer={path="a", extract="regex:(["}\n',
            "not a valid regular expression",
        ),
        (
            '[map]\ndomain="math"\nsource="s"\n[fields]\nproblem={path=5}\n',
            "path must be a string or a list of strings",
        ),
        (
            '[map]\ndomain="math"\nsource="s"\n[fields]\nproblem={path="q", strip_suffix=5}\n',
            "strip_suffix must be a string",
        ),
        (
            '[map]\ndomain="math"\nsource="s"\n[fields]\nproblem={path="q", extract=3}\n',
            "unknown extractor",
        ),
    ],
)
def test_broken_maps_raise_config_errors_that_name_the_fix(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message):
        load_map(_write_map(tmp_path, body))


def test_unknown_map_and_unknown_columns_name_what_is_available():
    with pytest.raises(NotFoundError, match="did you mean 'gsm8k'.*available: .*ttrl"):
        load_map("gsm8kk")
    with pytest.raises(ConfigError, match="columns in the file: answer, question"):
        load_map("ttrl").check_columns({"question", "answer"}, "gsm8k.jsonl")


def test_every_shipped_map_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "ingest.md").read_text(encoding="utf-8")
    missing = [n for n in available_maps() if f"| `{n}` |" not in doc]
    assert not missing, f"maps missing from docs/ingest.md: {missing}"


def test_hub_skywork_math_map_on_a_row_shaped_like_the_dataset():
    # Shape as documented by verl preprocessors of Skywork-OR1-RL-Data (no Hub access here).
    m = load_map("hub_skywork_or1_math")
    row = {
        "data_source": "train-math-deepscaler",
        "prompt": [{"role": "user", "content": "Compute $1+1$."}],
        "reward_model": {"ground_truth": "['2', '2.0']", "style": "rule"},
        "extra_info": {"index": 3, "model_difficulty": {"DeepSeek-R1-Distill-Qwen-7B": 1}},
    }
    rec = m.apply(row)
    assert rec["problem"] == "Compute $1+1$." and rec["answer"] == "2"
    assert rec["metadata"]["ground_truths"] == ["2", "2.0"]
    row["reward_model"]["ground_truth"] = "0.50"
    assert m.apply(row)["answer"] == "0.50"


def test_hub_taco_map_reads_json_string_tests_and_solutions():
    m = load_map("hub_taco")
    row = {
        "question": "Add two numbers.",
        "solutions": '["print(sum(map(int, input().split())))"]',
        "starter_code": "",
        "input_output": '{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}',
        "source": "codeforces",
        "date": "2021-01-01",
        "difficulty": "EASY",
    }
    rec = m.apply(row)
    assert rec["solutions"] == ["print(sum(map(int, input().split())))"]
    assert rec["tests"] == [
        {"kind": "stdin", "input": "1 2\n", "output": "3\n", "entry_point": None}
    ]
    assert rec["platform"] == "codeforces" and rec["contest_date"] == "2021-01-01"
    row["input_output"] = "{'inputs': oops"
    with pytest.raises(FieldError, match="not valid JSON"):
        m.apply(row)


def test_hub_code_contests_concatenates_public_and_private_tests():
    m = load_map("hub_code_contests")
    row = {
        "name": "1500_A. Sum",
        "description": "Print a+b.",
        "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
        "private_tests": {"input": ["5 5\n", "0 0\n"], "output": ["10\n", "0\n"]},
        "generated_tests": {"input": ["9 9\n"], "output": ["18\n"]},
        "solutions": {"language": [3], "solution": ["print(sum(map(int,input().split())))"]},
        "cf_contest_id": 1500,
        "cf_index": "A",
        "source": 2,
        "difficulty": 7,
    }
    rec = m.apply(row)
    assert [t["input"] for t in rec["tests"]] == ["1 2\n", "5 5\n", "0 0\n"]
    assert rec["contest_id"] == "1500" and rec["problem_id"] == "A"
    assert rec["solutions"] == ["print(sum(map(int,input().split())))"]


def test_hub_numinamath_answer_is_the_last_boxed_value():
    m = load_map("hub_numinamath_cot")
    rec = m.apply(
        {"source": "olympiads", "problem": "Find x.", "solution": r"So $x=\boxed{\frac{1}{2}}$."}
    )
    assert rec["answer"] == r"\frac{1}{2}" and rec["metadata"] == {"origin": "olympiads"}
    with pytest.raises(FieldError, match="extract = 'boxed' found nothing in solution"):
        m.apply({"source": "s", "problem": "Find x.", "solution": "no final box"})


def test_a_nan_value_is_missing_not_the_text_nan():
    """pandas writes a missing value as NaN: a required field that holds one is missing (the
    row is rejected as for null), never the answer "nan"; an optional one is None."""
    m = load_map("generic_math")
    with pytest.raises(FieldError, match="missing or empty") as exc:
        m.apply({"problem": "What?", "answer": float("nan")})
    assert exc.value.field == "answer"
    assert m.apply({"problem": "What?", "answer": 1.5})["answer"] == "1.5"


_M = '[map]\ndomain="math"\nsource="s"\n'


@pytest.mark.parametrize(
    "body, message",
    [
        (_M + '[fields]\nproblem="q"\nanswer={path="a", optional="false"}\n', "optional must be"),
        (_M + '[fields]\nproblem={path="q", as_list="no"}\n', "as_list must be"),
        (_M + '[fields]\nproblem="q"\nanswer={path=[]}\n', "path names no column"),
        (_M + 'version="abc"\n[fields]\nproblem="q"\n', "version must be a whole number"),
        (_M + 'keep_rest="no"\n[fields]\nproblem="q"\n', "keep_rest must be"),
        (_M + '[fields]\nproblem="q"\ntests=5\n', r"tests.* must be a path or a table"),
        (_M + '[fields]\nproblem="q"\ntests={path="t", parse="yaml"}\n', "parse must be"),
        ("fields=3\n" + _M, r"\[fields\] must be a table"),
        (_M + '[fields]\nproblem="q"\n[metadata]\nx={path="a", optional=1}\n', "optional must"),
        ('map=3\n[fields]\nproblem="q"\n', r"\[map\] must be a table"),
        ('[map]\ndomain="math"\nsource=5\n[fields]\nproblem="q"\n', "source must be text"),
    ],
)
def test_map_values_of_the_wrong_type_are_config_errors(tmp_path, body, message):
    """Each was a traceback (version, tests, fields) or silently read another way: 'false' and
    'no' are true in Python, an empty path read null for every row."""
    with pytest.raises(ConfigError, match=message) as exc:
        load_map(_write_map(tmp_path, body))
    assert "my.toml" in str(exc.value)


def test_required_may_be_one_name(tmp_path):
    """required = "answer" was read letter by letter ('required field 'a' is not ...')."""
    m = load_map(_write_map(tmp_path, _M + 'required="answer"\n[fields]\nproblem="q"\n'))
    assert m.required == ("answer",)
