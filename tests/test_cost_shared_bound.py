"""The reused-bytes bound (:func:`prefixsim.cost.check_cost`) is one rule for the CLI and the
sweep, checked before any replay and before the sweep's run folder is made (audit of issues 21
and 22, Fail 8 and Partly 14).

A request reuses at most ``min(ceil(input_length / block_size), len(hash_ids))`` blocks; a
trace is refused iff the sum of those times ``kv_bytes_per_block`` can pass 2**63 - 1. The
expected answer here is that formula, computed in Python integers from the trace as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import prefixsim
from prefixsim.models import profile_dir
from test_sweep_config_errors import cli  # noqa: F401

INT64_MAX = 2**63 - 1
BLOCK_SIZE = 16


def _huge_model(folder: Path) -> Path:
    """A model of 2**51 KV bytes per token: 2**55 bytes per 16-token block, so 255 blocks fit
    in int64 and 256 do not."""
    lines = (profile_dir("model") / "llama-3.1-8b.yaml").read_text().splitlines()
    values = {"name": "huge", "layers": 131072, "kv_heads": 65536, "head_dim": 65536}
    values["attention_heads"] = 1
    out = []
    for line in lines:
        key = line.partition(":")[0]
        out.append(f"{key}: {values[key]}" if key in values else line)
    path = folder / "model" / "huge.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


def _trace(path: Path, requests: list[tuple[int, int]]) -> Path:
    """Requests of (input_length, number of hash_ids), each with its own blocks."""
    with path.open("w") as f:
        next_id = 0
        for t, (n, ids) in enumerate(requests):
            hash_ids = list(range(next_id, next_id + ids))
            next_id += ids
            row = {"timestamp": t, "input_length": n, "output_length": 1, "hash_ids": hash_ids}
            f.write(json.dumps(row) + "\n")
    return path


def _refused(requests: list[tuple[int, int]], per_block: int) -> bool:
    blocks = sum(min(-(-n // BLOCK_SIZE), ids) for n, ids in requests)
    return blocks * per_block > INT64_MAX


CASES = {
    "255 full blocks fit": [(255 * 16, 255)],
    "256 full blocks do not": [(256 * 16, 256)],
    "split over requests": [(100 * 16, 100), (100 * 16, 100), (55 * 16, 55)],
    "split over requests, one too many": [(100 * 16, 100), (100 * 16, 100), (56 * 16, 56)],
    "long prompts, few hash_ids": [(2**50, 2), (2**50, 2)],
    "long prompts, many hash_ids": [(2**50, 200), (2**50, 200)],
    "short prompts, many hash_ids": [(16 * 100, 300), (16 * 100, 300)],
    "short prompts, many hash_ids, past": [(16 * 130, 300), (16 * 130, 300)],
    "partial last blocks count": [(16 * 127 + 1, 200), (16 * 127 + 1, 200)],
}


def test_the_cases_lie_on_both_sides_of_the_bound() -> None:
    per_block = 2**55
    answers = {name: _refused(reqs, per_block) for name, reqs in CASES.items()}
    assert any(answers.values()) and not all(answers.values())


@pytest.mark.parametrize("name", list(CASES))
def test_cli_and_sweep_refuse_the_same_traces(
    cli,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:  # type: ignore[no-untyped-def]
    from prefixsim.cli import main as cli_main

    requests = CASES[name]
    outside = tmp_path.parent / f"{tmp_path.name}-in"
    outside.mkdir()
    model = _huge_model(outside)
    per_block = prefixsim.load_model(str(model)).kv_bytes_per_block(BLOCK_SIZE)
    assert per_block == 2**55
    trace = _trace(outside / "t.jsonl", requests)
    expected = _refused(requests, per_block)

    capsys.readouterr()
    cli_code = cli_main(
        [
            str(trace),
            "--block-size",
            str(BLOCK_SIZE),
            "--model",
            str(model),
            "--capacity",
            "4",
            "--policy",
            "LRU",
        ]
    )
    cli_err = capsys.readouterr().err
    assert cli_code == (2 if expected else 0), cli_err

    args = ["--config-dir", str(outside), "model=huge", f"trace={trace}"]
    args += [f"block_size={BLOCK_SIZE}", "capacity=4", "policy=LRU"]
    code, lines = cli(*args)
    if expected:
        assert code == 2, lines
        assert len(lines) == 1 and "input_length" in lines[0], lines
        assert "could reuse more than 2**63 - 1 bytes" in lines[0], lines
        assert "2**63 - 1 bytes" in cli_err
        assert not any(tmp_path.iterdir())  # no run folder
    else:
        assert code == 0, lines


def test_the_sweep_refuses_before_the_run_folder_with_tiers(cli, tmp_path: Path) -> None:  # noqa: F811  # type: ignore[no-untyped-def]
    outside = tmp_path.parent / f"{tmp_path.name}-in"
    outside.mkdir()
    _huge_model(outside)
    trace = _trace(outside / "t.jsonl", [(300 * 16, 300)])
    args = ["--config-dir", str(outside), "model=huge", f"trace={trace}", "block_size=16"]
    code, lines = cli(*args, "tiers=hbm_dram", "tiers.hbm.capacity=4", "tiers.dram.capacity=8")
    assert code == 2, lines
    assert len(lines) == 1 and "t.jsonl:1: input_length" in lines[0], lines
    assert not any(tmp_path.iterdir())


def test_the_runtime_message_names_its_cause() -> None:
    # a caller of prefill_cost without check_cost: the message says which quantity passed
    from prefixsim.cost import prefill_cost

    model = prefixsim.load_model("llama-3.1-8b")
    per_block = model.kv_bytes_per_block(BLOCK_SIZE)
    n = INT64_MAX // per_block * BLOCK_SIZE
    with pytest.raises(prefixsim.ParameterError) as info:
        prefill_cost(model, [n, n], [n, n], BLOCK_SIZE)
    message = str(info.value)
    assert "ceil(hit_tokens / block_size)" in message and "kv_bytes_per_block" in message
    assert "their sum" not in message
