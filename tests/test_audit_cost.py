"""The cost model where no test looked: the cluster's prefill time on every model shape (MLA's
value_dim != head_dim among them), tensor parallelism (``n_gpus > 1``) in the engine, the
cluster and the sweep, and the largest accepted byte count and one past it.

Expected numbers are the closed forms of ``docs/cost-model.md`` computed here in exact Python
integers and fractions, never read back from the code under test."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import prefixsim
from conftest import make_trace
from prefixsim import ParameterError
from prefixsim.cluster import replay_cluster
from prefixsim.cost import capacity_from_size, prefill_cost, prefill_cost_reference
from prefixsim.hardware import HardwareProfile, load_hardware
from prefixsim.models import ModelProfile, load_model, model_names
from prefixsim.units import MAX_BYTES, UNITS, parse_size
from test_cost import TINY, models
from test_cost_sweep import config, hardware_config, model_config, small_trace  # noqa: F401

INT64_MAX = 2**63 - 1


def exact_prefill_seconds(
    model: ModelProfile, hw: HardwareProfile, tier: str, n: int, h: int, block_size: int
) -> Fraction:
    """``flops(n, h) / effective_flops + ceil(h / block_size) * kv_bytes / bandwidth``, with the
    GPU count applied to both rates (docs/cost-model.md), as an exact fraction; ``flops`` with
    the up-projection of the reused latents of a latent-attention profile (paid when something
    is computed)."""
    attention = model.layers * model.attention_heads * (model.head_dim + model.value_dim)
    flops = 2 * model.active_params * (n - h) + attention * (n * (n + 1) - h * (h + 1))
    flops += model.reuse_flops_per_token() * h if h < n else 0
    reused = -(-h // block_size) * model.kv_bytes_per_block(block_size)
    gpus = hw.n_gpus
    eff = Fraction(hw.peak_flops[hw.compute_dtype]) * Fraction(hw.mfu) * gpus
    return Fraction(flops) / eff + Fraction(reused) / (Fraction(hw.bandwidth[tier]) * gpus)


def close(got: float, want: Fraction) -> bool:
    return abs(Fraction(got) - want) <= abs(want) * Fraction(1, 10**12)


# --- the cluster's prefill time is the cost model, on every model shape ------------------------


def cluster_trace(n: int = 60) -> prefixsim.Trace:
    """Requests that share and extend prefixes, some with a partial last block."""
    rng = np.random.default_rng(7)
    requests = []
    for i in range(n):
        base = int(rng.integers(0, 4))
        ids = [*(base * 100 + j for j in range(int(rng.integers(1, 6)))), 10_000 + i]
        requests.append((len(ids) * 16 - int(rng.integers(0, 16)), ids))
    return make_trace(requests)


@pytest.mark.parametrize("router", ["round_robin", "least_loaded"])
@pytest.mark.parametrize("name", model_names())
def test_cluster_prefill_is_the_cost_model_for_every_profile(name: str, router: str) -> None:
    # deepseek-v3 (MLA: head_dim 192, v_head_dim 128) is the profile whose attention term
    # tells head_dim + value_dim from 2 * head_dim; hardware with 8 GPUs scales both rates.
    model = load_model(name)
    trace = cluster_trace()
    for hw in (load_hardware("h100"), dataclasses.replace(load_hardware("b200"), n_gpus=8)):
        for engine in ("kernel", "reference"):
            r = replay_cluster(trace, 3, router, "LRU", 8, 16, model=model, hardware=hw,
                               cache_tier="dram_pcie", engine=engine)  # fmt: skip
            assert r.est_prefill_seconds is not None
            want = [
                exact_prefill_seconds(model, hw, "dram_pcie", int(n), int(h), 16)
                for n, h in zip(trace.input_lengths, r.hit_tokens, strict=True)
            ]
            assert sum(r.hit_tokens) > 0
            for got, w in zip(r.est_prefill_seconds.tolist(), want, strict=True):
                assert close(got, w), (name, hw.name, hw.n_gpus, engine, got, float(w))


@settings(max_examples=40, deadline=None)
@given(model=models(), n_gpus=st.integers(1, 16), router=st.sampled_from(["random", "kv_aware"]))
def test_cluster_prefill_is_the_cost_model_for_any_model(
    model: ModelProfile, n_gpus: int, router: str
) -> None:
    hw = HardwareProfile(
        name="gen", peak_flops={"bf16": 3e14}, bandwidth={"hbm": 2e12}, mfu=0.4, n_gpus=n_gpus
    )
    trace = cluster_trace(25)
    r = replay_cluster(trace, 2, router, "S3FIFO", 10, 16, model=model, hardware=hw)
    assert r.est_prefill_seconds is not None
    cost = prefill_cost(model, trace.input_lengths, r.hit_tokens, 16, hw, "hbm")
    for got, n, h, c in zip(
        r.est_prefill_seconds.tolist(),
        trace.input_lengths.tolist(),
        r.hit_tokens.tolist(),
        cost.est_prefill_seconds.tolist(),  # type: ignore[union-attr]
        strict=True,
    ):
        want = exact_prefill_seconds(model, hw, "hbm", n, h, 16)
        assert close(got, want) and close(c, want)


# --- n_gpus > 1 ---------------------------------------------------------------------------------

TOY_TP = HardwareProfile(
    name="toy-tp", peak_flops={"bf16": 1000.0}, bandwidth={"hbm": 100.0}, mfu=0.5, n_gpus=2
)


def test_tensor_parallel_hand_worked() -> None:
    # TINY (test_cost.py): n = 4, h = 2 computes 5,792 FLOPs; one reused block of 2 tokens is
    # 256 bytes. Two GPUs: 1000 * 0.5 * 2 = 1,000 FLOP/s and 100 * 2 = 200 bytes/s, so
    # 5.792 s + 1.28 s = 7.072 s with the cache, 10,560 / 1,000 = 10.56 s without: 3.488 s saved
    # (one GPU: 14.144 s and 21.12 s).
    assert TOY_TP.effective_flops == 1000.0
    assert TOY_TP.tier_bandwidth("hbm") == 200.0
    ref = prefill_cost_reference(TINY, 4, 2, 2, TOY_TP, "hbm")
    assert ref["est_prefill_seconds"] == pytest.approx(7.072, rel=1e-12)
    assert ref["est_prefill_seconds_no_cache"] == pytest.approx(10.56, rel=1e-12)
    assert ref["est_ttft_saved_seconds"] == pytest.approx(3.488, rel=1e-12)
    cost = prefill_cost(TINY, np.array([4, 3]), np.array([2, 3]), 2, TOY_TP, "hbm")
    assert cost.est_prefill_seconds is not None
    # n = 3, h = 3: no compute, ceil(3 / 2) = 2 blocks = 512 bytes at 200 B/s = 2.56 s
    assert cost.est_prefill_seconds.tolist() == pytest.approx([7.072, 2.56], rel=1e-12)


def test_tensor_parallel_profile_from_yaml(tmp_path: Path) -> None:
    doc = load_hardware("h100").to_dict()
    lines = ["name: h100x4", "n_gpus: 4", f"mfu: {doc['mfu']}", "peak_flops:"]
    lines += [f"  {k}: {v}" for k, v in doc["peak_flops"].items()]
    lines += ["bandwidth:"] + [f"  {k}: {v}" for k, v in doc["bandwidth"].items()]
    path = tmp_path / "h100x4.yaml"
    path.write_text("\n".join(lines) + "\n")
    hw = load_hardware(str(path))
    one = load_hardware("h100")
    assert hw.n_gpus == 4
    assert hw.effective_flops == one.effective_flops * 4
    assert hw.tier_bandwidth("nvme") == one.tier_bandwidth("nvme") * 4


def test_sweep_charges_n_gpus(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    model, tier = load_model("llama-3.1-8b"), "nvme"
    out = tmp_path / "out"
    kw = {"policy": ["LRU"], "capacity": [64], "model": model_config("llama-3.1-8b")}
    one = hardware_config("h100")
    four = dataclasses.replace(one, n_gpus=4)
    assert run(out, small_trace, one, tier, kw) == 1
    assert run(out, small_trace, four, tier, kw) == 1  # another GPU count is another point
    res = pd.read_parquet(out / "results.parquet").sort_values("point_id")
    trace = prefixsim.load_trace(str(small_trace))
    hits = prefixsim.replay(trace, "LRU", 64).hit_tokens
    for row, gpus in zip(res.itertuples(), (1, 4), strict=True):
        hw = dataclasses.replace(load_hardware("h100"), n_gpus=gpus)
        want = [
            exact_prefill_seconds(model, hw, tier, int(n), int(h), 512)
            for n, h in zip(trace.input_lengths, hits, strict=True)
        ]
        assert close(row.est_prefill_seconds, sum(want, Fraction(0)))
    first, second = res.est_prefill_seconds.tolist()
    assert first == pytest.approx(4 * second, rel=1e-12)


def run(out: Path, trace: Path, hw: object, tier: str, kw: dict[str, object]) -> int:
    from sweep import run_sweep

    summary = run_sweep(config(out, trace, hardware=hw, cache_tier=tier, **kw))
    assert summary.exit_code == 0
    return summary.computed


# --- the largest accepted byte count, and one past it ------------------------------------------


def decimal_text(n_bytes: int, per: int) -> str:
    """``n_bytes / per`` written out exactly, for ``per`` a power of 10."""
    digits = len(str(per)) - 1
    assert per == 10**digits
    whole, rest = divmod(n_bytes, per)
    return f"{whole}.{rest:0{digits}d}"


@pytest.mark.parametrize("unit", list(UNITS))
def test_largest_size_in_every_unit(unit: str) -> None:
    per = UNITS[unit]
    assert MAX_BYTES == INT64_MAX
    largest = INT64_MAX // per
    assert parse_size("cache_size", f"{largest}{unit}") == largest * per
    with pytest.raises(ParameterError, match=r"cache_size.*too large") as info:
        parse_size("cache_size", f"{largest + 1}{unit}")
    assert "\n" not in str(info.value)
    if per > 1 and per == 10 ** (len(str(per)) - 1):  # decimal: the byte count, one byte past
        assert parse_size("cache_size", decimal_text(INT64_MAX, per) + unit) == INT64_MAX
        with pytest.raises(ParameterError, match="too large"):
            parse_size("cache_size", decimal_text(INT64_MAX + 1, per) + unit)


@pytest.mark.parametrize("value", [INT64_MAX, str(INT64_MAX), f"{INT64_MAX} B"])
def test_largest_byte_count_is_accepted(value: int | str) -> None:
    assert parse_size("cache_size", value) == INT64_MAX
    model = load_model("llama-3.1-8b")  # 64 MiB a block at 512 tokens
    blocks, size = capacity_from_size(value, model, 512)
    assert (blocks, size) == (INT64_MAX // 2**26, INT64_MAX)


@pytest.mark.parametrize("value", [INT64_MAX + 1, str(INT64_MAX + 1), "8EiB", 2**64])
def test_one_past_the_largest_byte_count_is_refused(value: int | str) -> None:
    with pytest.raises(ParameterError, match=r"--cache-size.*too large") as info:
        capacity_from_size(value, load_model("llama-3.1-8b"), 512, key="--cache-size")
    assert "\n" not in str(info.value)
