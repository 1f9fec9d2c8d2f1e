"""Model and hardware profiles: bytes per block derived from the published configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixsim import ParameterError
from prefixsim.hardware import TIERS, hardware_names, load_hardware
from prefixsim.models import ModelProfile, load_model, model_names

MIB = 2**20

REQUIRED_MODELS = {
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "mistral-7b-v0.1",
    "mistral-7b-v0.3",
    "mixtral-8x7b",
    "deepseek-v3",
}


def test_bundled_profiles() -> None:
    assert set(model_names()) >= REQUIRED_MODELS
    assert {"h100", "h200", "a100", "mi300x", "b200"} <= set(hardware_names())
    for name in model_names():
        model = load_model(name)
        assert model.name == name
        assert model.source.startswith("https://")
    for name in hardware_names():
        hw = load_hardware(name)
        assert hw.name == name
        assert set(hw.bandwidth) == set(TIERS)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # 2 (K and V) * 80 layers * 8 KV heads * 128 head_dim * 2 bytes (bf16) * 512 tokens
        # = 167,772,160 = 160 MiB (the check value)
        ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2 * 512),
        # 2 * 32 * 8 * 128 * 2 * 512 = 67,108,864 = 64 MiB
        ("llama-3.1-8b", 64 * MIB),
        # 2 * 126 * 8 * 128 * 2 * 512 = 264,241,152 = 252 MiB
        ("llama-3.1-405b", 252 * MIB),
        # 2 * 28 * 4 * 128 * 2 * 512 = 29,360,128 = 28 MiB
        ("qwen2.5-7b", 28 * MIB),
        # same shape as Llama-3.1-70B: 160 MiB
        ("qwen2.5-72b", 160 * MIB),
        # Mistral and Mixtral share Llama-3.1-8B's attention shape: 64 MiB
        ("mistral-7b-v0.3", 64 * MIB),
        ("mixtral-8x7b", 64 * MIB),
        # MLA: 61 layers * (512 latent + 64 rope) * 2 bytes * 512 tokens = 35,979,264 (34.3 MiB)
        ("deepseek-v3", 35_979_264),
    ],
)
def test_kv_bytes_per_block(name: str, expected: int) -> None:
    assert load_model(name).kv_bytes_per_block(512) == expected


def test_kv_dtype() -> None:
    model = load_model("llama-3.1-70b")
    assert model.kv_bytes_per_block(512, "fp8") == 80 * MIB  # one byte per element
    assert load_model("llama-3.1-70b", kv_dtype="fp8").kv_bytes_per_block(512) == 80 * MIB
    assert model.kv_bytes_per_block(16) == 160 * MIB // 32  # linear in block_size
    with pytest.raises(ParameterError, match="kv_dtype='int3'"):
        model.kv_bytes_per_block(512, "int3")


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(ParameterError, match="unknown model") as info:
        load_model("llama-4")
    assert "llama-3.1-70b" in str(info.value)
    with pytest.raises(ParameterError, match="unknown hardware") as info:
        load_hardware("h1000")
    assert "h100" in str(info.value)


def test_profile_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "name: tiny\nlayers: 2\nattention_heads: 4\nkv_heads: 2\nhead_dim: 8\nhidden_size: 32\n"
        "total_params: 1000\nactive_params: 1000\n"
    )
    model = load_model(str(path))
    # 2 * 2 layers * 2 KV heads * 8 head_dim * 2 bytes * 4 tokens = 512
    assert model.kv_bytes_per_block(4) == 512
    path.write_text(path.read_text() + "layer: 3\n")
    with pytest.raises(ParameterError, match="layer"):
        load_model(str(path))


def test_profile_validation() -> None:
    base = dict(
        name="x",
        layers=2,
        attention_heads=4,
        kv_heads=2,
        head_dim=8,
        hidden_size=32,
        total_params=10,
        active_params=10,
    )
    with pytest.raises(ParameterError, match=r"model\.layers"):
        ModelProfile(**{**base, "layers": 0})
    with pytest.raises(ParameterError, match=r"model\.active_params"):
        ModelProfile(**{**base, "active_params": 11})
    with pytest.raises(ParameterError, match=r"model\.kv_lora_rank"):
        ModelProfile(**{**base, "attention": "mla"})
    with pytest.raises(ParameterError, match=r"model\.attention"):
        ModelProfile(**{**base, "attention": "mha"})
