"""Trace options and chat content under hostile input (issue 22): a chat template is only
``{role}`` and ``{content}``, a lone surrogate is a bad line (with and without a
tokenizer.json), ``arrival_rate`` keeps every timestamp finite, and the messages say that token
and chat traces are read too (issue 21)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cli_checks import one_line_exit_2, run_module
from prefixsim import ParameterError, TraceError, load_trace
from prefixsim.formats import TraceOptions


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("PREFIXSIM_CACHE_DIR", str(path))
    return path


def chat_file(tmp_path: Path, contents: list[str], name: str = "c.jsonl") -> Path:
    path = tmp_path / name
    rows = [{"messages": [{"role": "user", "content": c}]} for c in contents]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- chat templates: {role} and {content}, nothing else ----------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "{role[x]}{content}",
        "{role[0]}{content}",
        "{role.upper}{content}",
        "{content.__class__}",
        "{role!r}: {content}",
        "{role:>10}{content}",
        "{content:{role}}",
        "{}{content}",
        "{0}{content}",
        "{role}{content",
        "{role}",
    ],
)
def test_template_fields_other_than_role_and_content_are_refused(
    tmp_path: Path, template: str
) -> None:
    path = chat_file(tmp_path, ["hello"])
    with pytest.raises(ParameterError, match="chat_template"):
        load_trace(path, block_size=2, options=TraceOptions(chat_template=template))


def test_templates_that_are_allowed(tmp_path: Path) -> None:
    path = chat_file(tmp_path, ["a{b}c"])
    trace = load_trace(
        path, block_size=1, options=TraceOptions(chat_template="<{role}>{{x}}{content}")
    )
    assert trace.input_lengths.tolist() == [len("<user>{x}a{b}c")]


@pytest.mark.parametrize("template", ["{role[x]}{content}", "{role.upper}{content}"])
def test_cli_template_errors(tmp_path: Path, template: str) -> None:
    path = chat_file(tmp_path, ["hello"])
    proc = run_module("prefixsim", str(path), "--block-size", "4", "--chat-template", template)
    one_line_exit_2(proc, "chat_template")
    assert proc.stdout == ""


# -- lone surrogates in chat content -----------------------------------------------------------


def surrogate_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "fine"}]})
    # JSON escapes a lone surrogate; json.loads gives a str that cannot be encoded as UTF-8
    bad = (
        '{"messages": [{"role": "user", "content": "ok"}, '
        '{"role": "user", "content": "a\\ud800b"}]}'
    )
    path.write_text(good + "\n\n" + bad + "\n")
    return path


def test_lone_surrogate_is_a_bad_line(tmp_path: Path) -> None:
    path = surrogate_file(tmp_path)
    with pytest.raises(TraceError, match=r":3: messages: .*element 1 .*surrogate") as err:
        load_trace(path, block_size=2)
    assert "\\ud800" in str(err.value)


def test_lone_surrogate_in_the_role(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"messages": [{"role": "\\udfff", "content": "x"}]}\n')
    with pytest.raises(TraceError, match=r":1: messages: .*element 0 has role .*surrogate"):
        load_trace(path, block_size=2)


def test_lone_surrogate_with_a_tokenizer(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok_path = tmp_path / "tokenizer.json"
    tok.save(str(tok_path))
    path = surrogate_file(tmp_path)
    with pytest.raises(TraceError, match="surrogate"):
        load_trace(path, block_size=2, options=TraceOptions(tokenizer=str(tok_path)))
    proc = run_module("prefixsim", str(path), "--block-size", "2", "--tokenizer", str(tok_path))
    one_line_exit_2(proc, f"{path}:3: messages")


def test_cli_lone_surrogate(tmp_path: Path) -> None:
    path = surrogate_file(tmp_path)
    one_line_exit_2(run_module("prefixsim", str(path), "--block-size", "4"), f"{path}:3: messages")
    out = tmp_path / "o.jsonl"
    proc = run_module("prefixsim.convert", str(path), str(out), "--block-size", "4")
    one_line_exit_2(proc, f"{path}:3: messages")
    assert not out.exists()


# -- arrival_rate: every timestamp finite ------------------------------------------------------


@pytest.mark.parametrize(
    "rate",
    [1e-320, 1e-300, 0.0, -1.0, float("nan"), float("inf"), True, "1", 1e-10],
    ids=["1e-320", "1e-300", "0", "negative", "nan", "inf", "bool", "str", "1e-10"],
)
def test_arrival_rate_out_of_range(rate: object) -> None:
    with pytest.raises(ParameterError, match="arrival_rate"):
        TraceOptions(arrival_rate=rate)  # type: ignore[arg-type]


def test_arrival_rate_at_the_bound_gives_finite_timestamps(tmp_path: Path) -> None:
    path = chat_file(tmp_path, ["a", "b", "c"])
    trace = load_trace(path, block_size=1, options=TraceOptions(arrival_rate=1e-9))
    assert np.isfinite(trace.timestamps).all()
    assert trace.timestamps.tolist() == pytest.approx([0.0, 1e12, 2e12], rel=1e-15)


def test_cli_and_convert_refuse_a_tiny_arrival_rate(tmp_path: Path) -> None:
    path = chat_file(tmp_path, ["hello there", "hello there"])
    one_line_exit_2(
        run_module("prefixsim", str(path), "--block-size", "4", "--arrival-rate", "1e-320"),
        "arrival_rate",
    )
    out = tmp_path / "o.jsonl"
    proc = run_module(
        "prefixsim.convert", str(path), str(out), "--block-size", "4", "--arrival-rate", "1e-320"
    )
    one_line_exit_2(proc, "arrival_rate")
    assert not out.exists()


def test_convert_output_is_standard_json_read_back(tmp_path: Path) -> None:
    path = chat_file(tmp_path, ["hello there", "hello there"])
    out = tmp_path / "o.jsonl"
    proc = run_module(
        "prefixsim.convert", str(path), str(out), "--block-size", "4", "--arrival-rate", "1e-9"
    )
    assert proc.returncode == 0, proc.stderr
    for line in out.read_text().splitlines():
        row = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
        assert math.isfinite(row["timestamp"])
    assert load_trace(out).n_requests == 2


@pytest.mark.parametrize(
    ("key", "value"),
    [("chain", 2), ("chat_template", 5), ("tokenizer", None), ("format", 3)],
)
def test_trace_options_types(key: str, value: object) -> None:
    with pytest.raises(ParameterError, match=key if key != "format" else "trace_format"):
        TraceOptions(**{key: value})  # type: ignore[arg-type]


# -- messages that name every format (issue 21) ------------------------------------------------


def test_missing_trace_names_every_format(tmp_path: Path) -> None:
    err = one_line_exit_2(run_module("prefixsim", str(tmp_path / "nope.jsonl")), "no such file")
    assert "Mooncake, token or chat" in err


def test_help_names_every_format() -> None:
    proc = run_module("prefixsim", "--help")
    assert proc.returncode == 0
    description = proc.stdout.split("\n\n")[1]
    assert "Mooncake" in description and "token" in description and "chat" in description


# -- timestamps: every difference of two finite ------------------------------------------------


@pytest.mark.parametrize(
    "row",
    [
        {"timestamp": 1e301, "input_length": 5, "output_length": 0, "hash_ids": [1]},
        {"timestamp": -1.7e308, "input_length": 5, "output_length": 0, "hash_ids": [1]},
        {"timestamp": 10**305, "token_ids": [1, 2, 3]},
        {"timestamp": -1e301, "messages": [{"role": "user", "content": "hi"}]},
    ],
    ids=["mooncake", "mooncake-negative", "tokens-int", "chat"],
)
def test_timestamps_past_1e300_are_refused(tmp_path: Path, row: dict[str, object]) -> None:
    path = tmp_path / "t.jsonl"
    first = {k: (0 if k == "timestamp" else v) for k, v in row.items()}
    path.write_text(json.dumps(first) + "\n\n" + json.dumps(row) + "\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:3: timestamp: .* at most 1e\+300"):
        load_trace(path, block_size=1)


def test_timestamps_at_the_bound_keep_the_cluster_finite(tmp_path: Path) -> None:
    from prefixsim.cluster import replay_cluster

    path = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": t, "input_length": 5, "output_length": 3, "hash_ids": [1]}
        for t in (1e300, -1e300, 1e300, -1e300)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = replay_cluster(
        str(path), 1, "least_loaded", "LRU", 4, model="llama-3.1-8b", hardware="h100"
    )
    assert res.queueing_delay is not None and np.isfinite(res.queueing_delay).all()
    assert res.queueing_delay.max() == pytest.approx(2e297)


def test_a_refused_template_is_refused_before_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace parsed, and cached, by a version that accepted ``{role.upper}`` is not read back
    under that template: the template is checked before the cache is looked up."""
    from prefixsim import _trace_cache

    path = chat_file(tmp_path, ["hello"])
    good = load_trace(path, block_size=2)
    fields = {
        k: getattr(good, k)
        for k in ("sha256", "timestamps", "input_lengths", "output_lengths", "offsets")
    }
    fields.update(block_ids=good.block_ids, n_blocks=good.n_blocks, line_numbers=good.line_numbers)
    monkeypatch.setattr(_trace_cache, "load", lambda key: dict(fields))
    with pytest.raises(ParameterError, match="chat_template"):
        load_trace(path, block_size=2, options=TraceOptions(chat_template="{role.upper}{content}"))
