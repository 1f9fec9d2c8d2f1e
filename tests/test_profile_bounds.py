"""Model and hardware profiles under hostile input: one line naming the file and the key, exit
status 2, no traceback, no hang; every float the cost model computes from them finite.

Issue 22: tiny rates gave ``Infinity``/``NaN`` seconds, numbers beyond float64 tracebacks, a
318-byte alias bomb ran for minutes, a non-UTF-8 file a ``UnicodeDecodeError``, and a derived
byte count named itself (``invalid reused_bytes=...``) instead of its cause.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from cli_checks import one_line_exit_2, run_module
from prefixsim import ParameterError, PrefixSimError, TraceError
from prefixsim.cost import (
    break_even_bandwidth,
    break_even_block,
    check_cost,
    prefill_cost,
    prefill_flops,
    prefill_flops_reference,
)
from prefixsim.errors import shown
from prefixsim.hardware import MAX_GPUS, MAX_RATE, MIN_MFU, MIN_RATE, HardwareProfile, load_hardware
from prefixsim.models import ModelProfile, load_model
from prefixsim.trace import Trace

GQA = {
    "name": "m",
    "layers": 32,
    "attention_heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "total_params": 8_000_000_000,
    "active_params": 8_000_000_000,
}
GPU = {"name": "g", "peak_flops": {"bf16": 1e15}, "bandwidth": {"hbm": 3e12}, "mfu": 0.5}


def write_profile(path: Path, doc: dict[str, object]) -> Path:
    lines = []
    for k, v in doc.items():
        if isinstance(v, dict):
            inner = ", ".join(f"{a}: {b}" for a, b in v.items())
            lines.append(f"{k}: {{{inner}}}")
        else:
            lines.append(f"{k}: {v}")
    path.write_text("\n".join(lines) + "\n")
    return path


# -- hardware: rates finite and bounded -------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mfu", 1.0e-320),
        ("mfu", 0.0),
        ("mfu", float("nan")),
        ("mfu", 1.5),
        ("peak_flops", {"bf16": 1e-300}),
        ("peak_flops", {"bf16": 1e308}),
        ("peak_flops", {"bf16": float("inf")}),
        ("peak_flops", {"bf16": 10**40}),
        ("bandwidth", {"hbm": 1e-320}),
        ("bandwidth", {"hbm": float("nan")}),
        ("n_gpus", 10**40),
        ("n_gpus", 0),
        ("n_gpus", True),
        ("compute_dtype", ["bf16"]),
        ("name", ["x"]),
    ],
)
def test_hardware_numbers_out_of_range_are_refused(key: str, value: object) -> None:
    with pytest.raises(ParameterError, match=f"hardware.{key}"):
        HardwareProfile(**{**GPU, key: value})  # type: ignore[arg-type]


def test_hardware_bounds_are_inclusive() -> None:
    hw = HardwareProfile(
        name="edge", peak_flops={"bf16": MAX_RATE}, bandwidth={"hbm": MIN_RATE}, mfu=MIN_MFU
    )
    assert hw.effective_flops == MAX_RATE * MIN_MFU
    assert HardwareProfile(**{**GPU, "n_gpus": MAX_GPUS}).n_gpus == MAX_GPUS  # type: ignore[arg-type]


def test_hardware_does_not_mutate_the_callers_tables() -> None:
    table = {"bf16": 10**15}
    hw = HardwareProfile(name="g", peak_flops=table, bandwidth={"hbm": 3 * 10**12})
    assert table == {"bf16": 10**15} and type(table["bf16"]) is int
    assert hw.peak_flops == {"bf16": 1e15}


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ({**GPU, "mfu": "1.0e-320"}, "hardware.mfu"),
        ({**GPU, "peak_flops": {"bf16": "1.0e-300"}}, "hardware.peak_flops.bf16"),
        ({**GPU, "bandwidth": {"hbm": "1.0e-320"}}, "hardware.bandwidth.hbm"),
        ({**GPU, "peak_flops": {"bf16": "1.0e+308"}, "n_gpus": 10}, "hardware.peak_flops.bf16"),
        ({**GPU, "n_gpus": "1" + "0" * 400}, "hardware.n_gpus"),
    ],
    ids=["mfu", "peak_flops", "bandwidth", "peak_flops_x10", "n_gpus"],
)
def test_cli_hardware_file_out_of_range(tmp_path: Path, doc: dict[str, object], key: str) -> None:
    path = write_profile(tmp_path / "hw.yaml", doc)
    proc = run_module(
        "prefixsim",
        "conversation",
        "--model",
        "llama-3.1-8b",
        "--hardware",
        str(path),
        "--no-per-request",
    )
    err = one_line_exit_2(proc, str(path), key)
    assert proc.stdout == "", err


# -- models: integers past int64, products past int64, named with the file --------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("active_params", 10**400),
        ("total_params", 2**63),
        ("head_dim", 2**64),
        ("layers", "32"),
        ("layers", 32.0),
        ("name", 7),
    ],
    ids=["active_params=10**400", "total_params=2**63", "head_dim=2**64", "str", "float", "name"],
)
def test_model_numbers_refused(key: str, value: object) -> None:
    doc = {**GQA, key: value}
    if key == "active_params":  # at most total_params, itself past int64 first
        doc["total_params"] = value
        key = "total_params"
    with pytest.raises(ParameterError, match=f"model.{key}"):
        ModelProfile(**doc)  # type: ignore[arg-type]


def test_derived_products_past_int64_name_their_largest_factor() -> None:
    with pytest.raises(
        ParameterError, match=r"model\.head_dim=4611686018427387904: one token's KV"
    ):
        ModelProfile(**{**GQA, "head_dim": 2**62})  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match=r"model\.attention_heads=.*attention FLOPs"):
        ModelProfile(**{**GQA, "attention_heads": 2**60, "kv_heads": 1})  # type: ignore[arg-type]
    mla = {**GQA, "attention": "mla", "kv_lora_rank": 2**62, "qk_rope_head_dim": 64}
    with pytest.raises(ParameterError, match=r"model\.kv_lora_rank"):
        ModelProfile(**mla)  # type: ignore[arg-type]
    # fp32 makes one token twice as heavy: the same rule when the dtype changes
    one = {"layers": 1, "attention_heads": 1, "kv_heads": 1, "head_dim": 2**61 - 1}
    near = ModelProfile(**{**GQA, **one})  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="fp32"):
        near.with_kv_dtype("fp32")


def test_one_block_past_int64_names_its_largest_factor() -> None:
    model = ModelProfile(**{**GQA, "layers": 1, "kv_heads": 1, "head_dim": 2**40})  # type: ignore[arg-type]
    assert model.kv_bytes_per_block(2**20) == 2 * 2**40 * 2 * 2**20
    # head_dim 2**40 is the larger factor of 2**22 tokens of 2**42 bytes (the profile's fault)
    with pytest.raises(ParameterError, match=r"invalid model.head_dim=1099511627776: one block"):
        model.kv_bytes_per_block(2**22)
    small = ModelProfile(**{**GQA, "layers": 1, "kv_heads": 1, "head_dim": 2**10})  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match=r"invalid block_size=4611686018427387904: one blo"):
        small.kv_bytes_per_block(2**62)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("total_params", "1" + "0" * 400),
        ("head_dim", str(2**62)),
        ("layers", '"32"'),
    ],
    ids=["total_params", "head_dim", "layers"],
)
def test_cli_model_file_errors_name_the_file_and_key(tmp_path: Path, key: str, value: str) -> None:
    doc: dict[str, object] = {**GQA, key: value}
    if key == "total_params":
        doc["active_params"] = value
    path = write_profile(tmp_path / "model.yaml", doc)
    one_line_exit_2(
        run_module("prefixsim", "conversation", "--model", str(path)), f"{path}: model.{key}"
    )


def test_profile_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(b"name: m\xff\xfe\nlayers: 32\n")
    one_line_exit_2(
        run_module("prefixsim", "conversation", "--model", str(path)), "not valid UTF-8", "0xff"
    )
    with pytest.raises(ParameterError, match="not valid UTF-8"):
        load_hardware(str(path))


def test_profile_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    # 9**8 = 43 million strings from 318 bytes (issue 22: past 60 s, a 580 MB error message)
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefg", "bcdefgh", strict=True):
        rows.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(rows) + "\nname: [*h]\n")
    start = time.perf_counter()
    with pytest.raises(ParameterError, match=r"aliases \(\*name\) are not allowed") as err:
        load_model(str(path))
    assert time.perf_counter() - start < 5 and len(str(err.value)) < 400
    # one alias is refused as well (a profile is a flat mapping: none is ever needed)
    small = tmp_path / "alias.yaml"
    small.write_text("name: &n m\nsource: *n\n")
    with pytest.raises(ParameterError, match="line 2, column 9"):
        load_model(str(small))


def test_profile_too_large_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: m\n" + "#" * (2 << 20) + "\n")
    with pytest.raises(ParameterError, match="larger than"):
        load_model(str(path))


def test_errors_quote_user_values_bounded() -> None:
    assert shown(10**5000) == "<an integer of 5001 digits>"
    assert shown(10**5000 - 1) == "<an integer of 5000 digits>"
    assert len(shown("x" * 10**6)) < 200 and "1000000 characters" in shown("x" * 10**6)
    nested: list[object] = ["lol"] * 9
    for _ in range(7):
        nested = [nested] * 9
    assert len(shown(nested)) <= 400
    with pytest.raises(ParameterError) as err:
        ModelProfile(**{**GQA, "name": nested})  # type: ignore[arg-type]
    assert len(str(err.value)) < 500


# -- the cost model: every float finite at the bounds, prompts up to 2**63 - 1 ----------------


# The largest FLOPs the bounds allow (attention coefficient 2**62, 2**63 - 1 active params)
# with the lightest blocks (2 bytes per token at fp8), so that the reused bytes of a prompt of
# 2**62 hit tokens still fit in int64.
EXTREME_MODEL = ModelProfile(
    name="extreme",
    layers=1,
    attention_heads=2**61,
    kv_heads=1,
    head_dim=1,
    hidden_size=2**62,
    total_params=2**63 - 1,
    active_params=2**63 - 1,
    kv_dtype="fp8",
)


def extreme_hardware(slowest: bool) -> HardwareProfile:
    if slowest:
        rates = {"peak_flops": {"bf16": MIN_RATE}, "bandwidth": {"hbm": MIN_RATE}}
        return HardwareProfile(name="slowest", **rates, mfu=MIN_MFU)  # type: ignore[arg-type]
    rates = {"peak_flops": {"bf16": MAX_RATE}, "bandwidth": {"hbm": MAX_RATE}}
    return HardwareProfile(name="fastest", **rates, mfu=1.0, n_gpus=MAX_GPUS)  # type: ignore[arg-type]


@pytest.mark.parametrize("slowest", [True, False])
def test_every_cost_float_is_finite_at_the_bounds(slowest: bool) -> None:
    hardware = extreme_hardware(slowest)
    n = np.array([2**63 - 1, 2**63 - 1, 1, 0, 2**31 + 1], dtype=np.int64)
    h = np.array([2**61, 0, 1, 0, 7], dtype=np.int64)
    cost = prefill_cost(EXTREME_MODEL, n, h, block_size=1, hardware=hardware)
    for name in (
        "prefill_flops",
        "prefill_flops_saved",
        "est_prefill_seconds_no_cache",
        "est_prefill_seconds",
        "est_ttft_saved_seconds",
    ):
        assert np.isfinite(getattr(cost, name)).all(), name
    assert all(v is None or math.isfinite(v) for v in cost.totals().values())
    assert math.isfinite(break_even_bandwidth(EXTREME_MODEL, hardware, 2**31 - 1))
    assert break_even_block(EXTREME_MODEL, hardware, 1, "hbm") >= 0


@pytest.mark.parametrize(
    ("n", "h"),
    [
        (2**31 + 1, 0),
        (2**40, 2**39 + 7),
        (3 * 10**18, 10**18),
        (2**63 - 1, 2**63 - 2),
        (2**63 - 1, 0),
        (2**63 - 1, 2**63 - 1),
    ],
)
def test_prompts_past_2_31_tokens_are_costed(n: int, h: int) -> None:
    """The README allows any input_length up to 2**63 - 1; the FLOPs stay within 1e-15 of the
    exact count and the totals are exact."""
    model = load_model("llama-3.1-8b")
    c = model.layers * model.attention_heads * (model.head_dim + model.value_dim)
    exact = 2 * model.active_params * (n - h) + c * (n * (n + 1) - h * (h + 1))
    got = prefill_flops(model, np.array([n, 5]), np.array([h, 2]))
    assert got[0] == pytest.approx(exact, rel=1e-15, abs=0)
    assert got[1] == prefill_flops_reference(model, 5, 2)
    # exact totals (a model of 2 bytes per token, so that 2**61 reused tokens fit in int64)
    light = EXTREME_MODEL
    h = min(h, 2**61)
    c = light.layers * light.attention_heads * (light.head_dim + light.value_dim)
    cost = prefill_cost(light, np.array([n, n], np.int64), np.array([0, h], np.int64), 2**20)
    full = 2 * light.active_params * n + c * n * (n + 1)
    assert cost.total_flops == 2 * full
    assert cost.total_flops_saved == 2 * light.active_params * h + c * h * (h + 1)


def test_est_seconds_past_2_31_match_the_closed_form() -> None:
    tiny = ModelProfile(**{**GQA, "total_params": 10, "active_params": 10})  # type: ignore[arg-type]
    gpu = HardwareProfile(name="t", peak_flops={"bf16": 1e12}, bandwidth={"hbm": 1e9})
    n, h, b = 2**33 + 5, 2**32 + 3, 512
    c = tiny.layers * tiny.attention_heads * (tiny.head_dim + tiny.value_dim)
    done = 2 * 10 * (n - h) + c * (n * (n + 1) - h * (h + 1))
    reused = -(-h // b) * tiny.kv_bytes_per_block(b)
    vec = prefill_cost(tiny, np.array([n]), np.array([h]), block_size=b, hardware=gpu)
    assert vec.reused_bytes[0] == reused
    assert vec.est_prefill_seconds is not None
    expected = done / gpu.effective_flops + reused / gpu.tier_bandwidth("hbm")
    assert vec.est_prefill_seconds[0] == pytest.approx(expected, rel=1e-15)


def _trace(lengths: list[int], ids: list[int] | None = None) -> Trace:
    """Requests of ``lengths`` tokens with ``ids[i]`` hash_ids each (none by default), on
    every other line of ``t.jsonl``."""
    k = len(lengths)
    counts = np.array(ids if ids is not None else [0] * k, dtype=np.int64)
    return Trace(
        name="t.jsonl",
        sha256="0" * 64,
        timestamps=np.zeros(k),
        input_lengths=np.array(lengths, dtype=np.int64),
        output_lengths=np.zeros(k, dtype=np.int64),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        block_ids=np.arange(int(counts.sum()), dtype=np.int32),
        n_blocks=int(counts.sum()),
        line_numbers=np.arange(1, k + 1, dtype=np.int64) * 2,
    )


def _huge_model() -> ModelProfile:
    """2**51 KV bytes per token: 2**55 per 16-token block, so 255 blocks fit in int64."""
    doc = load_model("llama-3.1-8b").to_dict()
    doc.update(name="huge", layers=131072, kv_heads=65536, head_dim=65536, attention_heads=1)
    model = ModelProfile.from_dict(doc, "huge")
    assert model.kv_bytes_per_block(16) == 2**55
    return model


def test_check_cost_names_the_cause_not_the_derived_quantity() -> None:
    model = load_model("llama-3.1-8b")  # 131,072 bytes per token
    per_block = model.kv_bytes_per_block(512)
    assert (
        check_cost(model, 512, capacity=(2**63 - 1) // per_block, trace=_trace([2**40], [2]))
        == per_block
    )
    with pytest.raises(ParameterError, match=r"^invalid capacity=.*at most 137438953471 blocks"):
        check_cost(model, 512, capacity=2**40)
    huge = _huge_model()
    # one request that could reuse more than int64 bytes: the trace, its line, input_length
    with pytest.raises(TraceError, match=r"^t\.jsonl:4: input_length: with huge"):
        check_cost(huge, 16, trace=_trace([7, 256 * 16], [1, 256]))
    # the sum over requests, each small enough alone: the line where the total passes
    with pytest.raises(TraceError, match=r"^t\.jsonl:6: input_length"):
        check_cost(huge, 16, trace=_trace([100 * 16, 100 * 16, 56 * 16], [100, 100, 56]))
    check_cost(huge, 16, trace=_trace([100 * 16, 100 * 16, 55 * 16], [100, 100, 55]))
    # a request reuses at most its hash_ids' blocks, and at most its prompt's
    check_cost(huge, 16, trace=_trace([2**47, 2**47], [2, 2]))
    check_cost(huge, 16, trace=_trace([100 * 16, 100 * 16], [1000, 1000]))
    with pytest.raises(TraceError, match=r"^t\.jsonl:4: input_length"):
        check_cost(huge, 16, trace=_trace([128 * 16, 128 * 16], [1000, 1000]))


def test_cli_refuses_a_reuse_past_int64_naming_the_line(tmp_path: Path) -> None:
    import yaml

    model = tmp_path / "huge.yaml"
    model.write_text(yaml.safe_dump(_huge_model().to_dict()))
    trace = tmp_path / "long.jsonl"
    row = {"timestamp": 0, "input_length": 256 * 16, "output_length": 0}
    trace.write_text(json.dumps({**row, "hash_ids": list(range(256))}) + "\n")
    proc = run_module(
        "prefixsim", str(trace), "--model", str(model), "--block-size", "16",
        "--capacity", "4", "--policy", "LRU", "--no-per-request",
    )  # fmt: skip
    err = one_line_exit_2(proc, f"{trace}:1: input_length")
    assert "reused_bytes" not in err


def test_cli_costs_a_request_of_2_40_tokens(tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    row = {"timestamp": 0, "input_length": 2**40, "output_length": 0, "hash_ids": [1, 2]}
    trace.write_text(json.dumps(row) + "\n")
    proc = run_module(
        "prefixsim", str(trace), "--model", "llama-3.1-8b", "--hardware", "h100", "--no-per-request"
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # standard JSON: no Infinity, no NaN
    model = load_model("llama-3.1-8b")
    c = model.layers * model.attention_heads * (model.head_dim + model.value_dim)
    n = 2**40
    assert report["prefill_flops"] == float(2 * model.active_params * n + c * n * (n + 1))
    assert all(math.isfinite(v) for v in report.values() if isinstance(v, float))


def test_every_profile_error_is_a_prefixsim_error(tmp_path: Path) -> None:
    """The CLIs print PrefixSimError on one line; anything else would be a traceback."""
    for text in ("name: [", "- a\n- b\n", "name: m\nlayers: !!python/object:os.system x\n", "{"):
        path = tmp_path / "p.yaml"
        path.write_text(text)
        for load in (load_model, load_hardware):
            with pytest.raises(PrefixSimError):
                load(str(path))


# -- the sweep reads a --config-dir profile through the same loader -----------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("name: [\n", "invalid YAML"),
        ("name: m\nattention_heads: 32\n", "m.yaml: layers=None: missing"),
        (None, "m.yaml: model.layers='32'"),  # the CLI refuses it: so does the sweep
        ('a: &a ["x","x"]\nname: [*a,*a]\n', "aliases"),
    ],
    ids=["bad-yaml", "missing-key", "string-int", "alias"],
)
def test_sweep_config_dir_profile_is_read_by_the_engine(
    tmp_path: Path, text: str | None, fragment: str
) -> None:
    from prefixsim.models import profile_dir

    (tmp_path / "conf" / "model").mkdir(parents=True)
    if text is None:
        bundled = (profile_dir("model") / "llama-3.1-8b.yaml").read_text()
        text = bundled.replace("layers: 32", 'layers: "32"')
        assert text != bundled
    (tmp_path / "conf" / "model" / "m.yaml").write_text(text)
    out = tmp_path / "run"
    proc = run_module(
        "sweep",
        "--config-dir",
        str(tmp_path / "conf"),
        "model=m",
        "capacity=64",
        "policy=LRU",
        "plot=false",
        f"out_dir={out}",
        cwd=tmp_path,
        timeout=300,
    )
    one_line_exit_2(proc, fragment)
    assert not out.exists()
