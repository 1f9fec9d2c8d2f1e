"""``python -m prefixsim --semantics``: the options, the report's semantics, and the refused
combinations (one line, exit status 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_checks import one_line_exit_2, run_module
from prefixsim.cli import build_parser, main

# Blocks of 4 tokens. R1 (5, [a, p]) caches a; its partial block p is temporary. R2 the same
# prompt: spec finds a and p resident (5 tokens, clamped); vLLM and SGLang hit a only (4).
TRACE = (
    '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, 2]}\n'
    '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1, 2]}\n'
)


def report(tmp_path: Path, *options: str) -> dict[str, Any]:
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "r.json"
    args = [str(trace), "--policy", "LRU_TAIL_FIRST", "--capacity", "4", "--block-size", "4"]
    assert main([*args, *options, "-o", str(out)]) == 0
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.mark.parametrize(
    ("options", "hits", "semantics"),
    [
        ((), [0, 5], {"semantics": "spec", "unhashed_free": "front", "cache_output_blocks": False}),
        (("--semantics", "vllm"), [0, 4], {"semantics": "vllm", "unhashed_free": "front"}),
        (
            ("--semantics", "vllm", "--unhashed-free", "back", "--cache-output-blocks"),
            [0, 4],
            {"semantics": "vllm", "unhashed_free": "back", "cache_output_blocks": True},
        ),
        (("--semantics", "sglang"), [0, 4], {"semantics": "sglang", "cache_output_blocks": False}),
    ],
)
def test_report_carries_the_semantics(
    tmp_path: Path, options: tuple[str, ...], hits: list[int], semantics: dict[str, object]
) -> None:
    got = report(tmp_path, *options)
    assert [r["hit_tokens"] for r in got["per_request"]] == hits
    assert {k: got[k] for k in semantics} == semantics
    assert got["engine"] == "kernel"  # the engine modes run compiled too


def test_help_has_one_line_each() -> None:
    text = build_parser().format_help()
    for option in ("--semantics {spec,vllm,sglang}", "--unhashed-free {front,back}"):
        assert option in text
    assert "--cache-output-blocks" in text and "docs/semantics.md" in text


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (("--unhashed-free", "back"), "invalid --unhashed-free='back': applies to semantics=vllm"),
        (
            ("--semantics", "sglang", "--unhashed-free", "back"),
            "invalid --unhashed-free='back'",
        ),
        (("--cache-output-blocks",), "invalid --cache-output-blocks=True: applies to"),
    ],
)
def test_bad_combinations_refused_in_one_line(
    tmp_path: Path, options: tuple[str, ...], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    assert main([str(trace), *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err


def test_unknown_semantics_is_argparse_exit_2() -> None:
    proc = run_module("prefixsim", "conversation", "--semantics", "vLLM")
    assert proc.returncode == 2
    assert "invalid choice: 'vLLM'" in proc.stderr.strip().splitlines()[-1]


def test_refusal_from_a_fresh_process(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    proc = run_module("prefixsim", str(trace), "--cache-output-blocks")
    one_line_exit_2(proc, "--cache-output-blocks")
