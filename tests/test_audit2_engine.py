"""The second audit of issues 21 and 22, engine side: a derived quantity that fails names the
key the user set (the profile's factor, the synth length typed), not a default or a bystander."""

from __future__ import annotations

import dataclasses

import pytest

from prefixsim import ParameterError
from prefixsim.models import load_model
from prefixsim.synth import SynthConfig, synth_plan

# --- Partly 6: one block past int64 named block_size=512 for a profile's kv_heads of 2**40 ---


@pytest.mark.parametrize(
    ("model", "key", "value"),
    [
        # llama-3.1-8b: 2 * 32 * 8 * 128 * 2 = 2**17 bytes per token; one factor 2**37+ larger
        # is at most 2**55 per token (fits), 2**64 per 512-token block (does not)
        ("llama-3.1-8b", "kv_heads", 2**40),
        ("llama-3.1-8b", "head_dim", 2**44),
        ("llama-3.1-8b", "layers", 2**43),
        # deepseek-v3: 61 * (512 + 64) * 2 bytes per token; 2**48 in one factor: ~2**55 (fits)
        ("deepseek-v3", "kv_lora_rank", 2**48),
        ("deepseek-v3", "qk_rope_head_dim", 2**48),
    ],
)
def test_a_block_past_int64_names_the_profiles_largest_factor(
    model: str, key: str, value: int
) -> None:
    profile = dataclasses.replace(load_model(model), **{key: value}, reuse_up_projection=False)
    assert profile.kv_bytes_per_token() <= 2**63 - 1
    with pytest.raises(ParameterError) as info:
        profile.kv_bytes_per_block(512)
    assert info.value.name == f"model.{key}"
    assert info.value.value == value


def test_a_huge_block_size_still_names_block_size() -> None:
    with pytest.raises(ParameterError) as info:
        load_model("llama-3.1-8b").kv_bytes_per_block(2**60)
    assert info.value.name == "block_size"


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"system_tokens_median": 1e18}, "system_tokens_median"),
        ({"system_tokens_median": 1e6}, "system_tokens_median"),
        ({"first_tokens_median": 1e18, "agent_fraction": 0.0}, "first_tokens_median"),
        (
            {"agent_context_tokens_median": 1e9, "agent_fraction": 1.0},
            "agent_context_tokens_median",
        ),
        ({"max_prompt_tokens": 600}, "max_prompt_tokens"),  # the default lengths, a small cap
        ({"max_prompt_tokens": 5}, "max_prompt_tokens"),  # not the default agent_turns_mean
        ({"max_prompt_tokens": 5, "agent_turns_mean": 7.0}, "agent_turns_mean"),
    ],
)
def test_synth_names_the_length_key_typed(kw: dict[str, float], key: str) -> None:
    with pytest.raises(ParameterError) as info:
        synth_plan(SynthConfig(requests=50, **kw))  # type: ignore[arg-type]
    assert info.value.name == key, str(info.value)


# --- Partly 9: a token trace with a >4,300-digit integer on its first line was "Mooncake" ----


@pytest.mark.parametrize(
    ("first", "fmt"),
    [
        ('{"timestamp": BIG, "token_ids": [1, 2, 3]}', "tokens"),
        ('{"token_ids": [BIG, 2, 3]}', "tokens"),
        ('{"timestamp": BIG, "messages": [{"role": "user", "content": "hi"}]}', "chat"),
        ('{"timestamp": 0, "input_length": BIG, "hash_ids": [1]}', "mooncake"),
        ('{"timestamp": -BIG, "token_ids": [1]}', "tokens"),
    ],
)
def test_format_detection_reads_integers_of_any_length(first: str, fmt: str) -> None:
    from prefixsim.formats import detect_format

    for digits in (10, 4301, 20_000):
        line = first.replace("BIG", "9" * digits)
        assert detect_format(line.encode() + b"\n", "t.jsonl") == fmt


def test_the_replay_names_the_field_of_a_long_integer(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from prefixsim import cli

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": ' + "9" * 5000 + ', "token_ids": [1, 2, 3]}\n')
    assert cli.main([str(trace), "--block-size", "2", "--capacity", "4", "--policy", "LRU"]) == 2
    err = capsys.readouterr().err
    assert "t.jsonl:1: timestamp:" in err and "input_length" not in err, err


# --- Partly 10: a profile that is a named pipe was "no such profile file", and listed --------


@pytest.fixture
def odd_profiles(tmp_path):  # type: ignore[no-untyped-def]
    import os

    conf = tmp_path / "conf"
    for kind in ("model", "hardware"):
        (conf / kind).mkdir(parents=True)
        os.mkfifo(conf / kind / "pipe.yaml")
        (conf / kind / "folder.yaml").mkdir()
    return conf


@pytest.mark.parametrize("kind", ["model", "hardware"])
@pytest.mark.parametrize(("name", "what"), [("pipe", "a named pipe"), ("folder", "a directory")])
def test_a_profile_that_is_not_a_file_says_what_it_is(odd_profiles, kind, name, what) -> None:  # type: ignore[no-untyped-def]
    from prefixsim.hardware import load_hardware

    load = load_model if kind == "model" else load_hardware
    with pytest.raises(ParameterError, match=f"is {what}; expected a regular YAML file"):
        load(str(odd_profiles / kind / f"{name}.yaml"))


@pytest.mark.parametrize("kind", ["model", "hardware"])
def test_the_sweep_neither_lists_nor_reads_them(odd_profiles, kind) -> None:  # type: ignore[no-untyped-def]
    from sweep.costing import check_profile_overrides

    argv = ["--config-dir", str(odd_profiles)]
    with pytest.raises(ParameterError, match="is a named pipe"):
        check_profile_overrides([*argv, f"{kind}=pipe"], odd_profiles / "none")
    with pytest.raises(ParameterError, match="is a directory"):
        check_profile_overrides([*argv, f"{kind}=folder"], odd_profiles / "none")
    with pytest.raises(ParameterError, match="unknown") as info:
        check_profile_overrides([*argv, f"{kind}=nothing"], odd_profiles / "none")
    assert "pipe" not in str(info.value) and "folder" not in str(info.value)


# --- Partly 3: the Python API's entries said nothing while the kernels compiled -------------


@pytest.mark.parametrize("entry", ["replay", "replay_tiers", "replay_cluster"])
def test_every_api_entry_listens_for_compiles(entry, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import contextlib

    import prefixsim
    from prefixsim import first_use

    entered: list[str] = []

    @contextlib.contextmanager
    def recording(stream=None):  # type: ignore[no-untyped-def]
        entered.append(entry)
        yield None

    monkeypatch.setattr(first_use, "noting", recording)
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}\n'
        '{"timestamp": 1, "input_length": 8, "output_length": 1, "hash_ids": [1, 3]}\n'
    )
    t = prefixsim.load_trace(str(trace), block_size=4)
    if entry == "replay":
        prefixsim.replay(t, "LRU", capacity=4, block_size=4, engine="reference")
    elif entry == "replay_tiers":
        tiers = [
            {"name": "hbm", "policy": "LRU", "capacity": 2},
            {"name": "dram", "policy": "LRU", "capacity": 4},
        ]
        prefixsim.replay_tiers(t, tiers, block_size=4, engine="reference")
    else:
        prefixsim.replay_cluster(t, 2, "round_robin", "LRU", 4, 4, engine="reference")
    assert entered == [entry]
