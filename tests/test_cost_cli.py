"""``python -m prefixsim --model/--cache-size/--hardware``: bytes, FLOPs and est_ time in the
report, checked against numbers worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixsim.cli import main

TINY_MODEL = """\
name: tiny
layers: 2
attention_heads: 4
kv_heads: 2
head_dim: 8
hidden_size: 32
total_params: 1000
active_params: 1000
"""
TOY_GPU = """\
name: toy
peak_flops: {bf16: 1000.0}
bandwidth: {hbm: 100.0, nvme: 10.0}
mfu: 0.5
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, 2]}\n'
        '{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1, 3]}\n'
    )
    (tmp_path / "tiny.yaml").write_text(TINY_MODEL)
    (tmp_path / "toy.yaml").write_text(TOY_GPU)
    return {
        "trace": str(trace),
        "model": str(tmp_path / "tiny.yaml"),
        "hardware": str(tmp_path / "toy.yaml"),
        "out": str(tmp_path / "report.json"),
    }


def test_report_with_model_and_hardware(files: dict[str, str]) -> None:
    args = [files["trace"], "--policy", "LRU", "--block-size", "2", "--model", files["model"]]
    args += ["--cache-size", "1KiB", "--hardware", files["hardware"], "-o", files["out"]]
    assert main(args) == 0
    report = json.loads(Path(files["out"]).read_text())
    # a block: 2 (K, V) * 2 layers * 2 KV heads * 8 head_dim * 2 bytes (bf16) * 2 tokens = 256;
    # 1 KiB = 1,024 bytes holds 4 blocks
    assert report["kv_bytes_per_block"] == 256
    assert report["capacity"] == 4 and report["cache_bytes"] == 1024
    # request 1 finds block 1 resident (k = 1): 2 hit tokens. Per request with n = 4 tokens:
    # flops(4, 0) = 2 * 1000 * 4 + 2 * 4 * 16 * (4 * 5) = 8,000 + 2,560 = 10,560
    # flops(4, 2) = 2 * 1000 * 2 + 2 * 4 * 16 * (4 * 5 - 2 * 3) = 4,000 + 1,792 = 5,792
    assert [r["hit_tokens"] for r in report["per_request"]] == [0, 2]
    assert [r["prefill_flops_saved"] for r in report["per_request"]] == [0.0, 4768.0]
    assert report["prefill_flops"] == 2 * 10560
    assert report["prefill_flops_saved"] == 4768
    assert report["reused_bytes"] == 256  # one block reused
    # 500 FLOP/s achieved: no cache 2 * 10,560 / 500 = 42.24 s; with the cache
    # 21.12 + 5,792 / 500 + 256 bytes / 100 B/s = 21.12 + 11.584 + 2.56 = 35.264 s
    assert report["est_prefill_seconds_no_cache"] == pytest.approx(42.24, rel=1e-12)
    assert report["est_prefill_seconds"] == pytest.approx(35.264, rel=1e-12)
    assert report["est_ttft_saved_seconds"] == pytest.approx(6.976, rel=1e-12)
    assert report["per_request"][1]["est_ttft_saved_seconds"] == pytest.approx(6.976, rel=1e-12)
    assert report["cache_tier"] == "hbm" and report["hardware"] == "toy"


def test_capacity_with_model_gives_its_bytes(files: dict[str, str]) -> None:
    args = [files["trace"], "--policy", "LRU", "--block-size", "2", "--model", files["model"]]
    args += ["--capacity", "3"]
    assert main([*args, "--no-per-request", "-o", files["out"]]) == 0
    report = json.loads(Path(files["out"]).read_text())
    assert report["cache_bytes"] == 3 * 256
    assert "est_prefill_seconds" not in report  # no hardware, no estimate


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cache-size", "1000B", "--capacity", "3"], "not both"),
        (["--cache-size", "255"], "smaller than one block"),
        (["--cache-size", "1Kb"], "in bits"),
        (["--cache-size=-1KiB"], "cannot be negative"),
        (["--hardware", "h1000"], "unknown hardware (known: a100"),
    ],
)
def test_errors(
    files: dict[str, str], extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [files["trace"], "--block-size", "2", "--model", files["model"], *extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_model_needed(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([files["trace"], "--cache-size", "1GiB"]) == 2
    assert "--cache-size" in capsys.readouterr().err
    assert main([files["trace"], "--model", "llama-4"]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "llama-3.1-70b" in err
