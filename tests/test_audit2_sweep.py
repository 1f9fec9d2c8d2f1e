"""The second audit of issues 21 and 22, sweep side: keys a grid would silently ignore, profile
keys checked without a model, quoted strings in overrides (one rule). Each refusal is one line,
exit status 2, nothing created (the in-process ``cli`` of ``test_sweep_config_errors``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweep import SweepConfig
from sweep.argv import ArgvError, rewrite_override
from sweep.config import TierConfig, TiersConfig
from sweep.grid import PlanError, plan_grid
from test_sweep_config_errors import SCHEMA_KEYS, assert_refused, cli  # noqa: F401

# --- Partly 2: a hierarchy's own keys at the top level were silently ignored ----------------


@pytest.mark.parametrize(
    "typed",
    [
        "policy=LRU",
        "policy=S3FIFO,LRU",  # the default's value, typed: still not what the tiers run
        "policy=S3FIFO",
        "small_ratio=0.2",
        "small_ratio=0.1",
        "max_freq=2",
        "ghost_freq=1",
    ],
)
@pytest.mark.parametrize("tiers", ["tiers=hbm_dram", "tiers=hbm_dram_ssd"])
def test_a_top_level_policy_key_with_tiers_is_refused(
    cli,  # noqa: F811
    tmp_path: Path,
    tiers: str,
    typed: str,
) -> None:  # type: ignore[no-untyped-def]
    key = typed.split("=")[0]
    assert_refused(
        cli, tmp_path, [tiers, typed], f"{key}: does not apply to a hierarchy", f"tiers.LEVEL.{key}"
    )


@pytest.mark.parametrize(
    "kw", [{"policy": ["LRU"]}, {"small_ratio": [0.25]}, {"max_freq": [1]}, {"ghost_freq": [2]}]
)
def test_the_api_refuses_them_too(kw: dict[str, object]) -> None:
    tiers = TiersConfig(name="t", order=["hbm"], hbm=TierConfig(capacity=[8]))
    cfg = SweepConfig(tiers=tiers, **kw)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match=f"{next(iter(kw))}: does not apply to a hierarchy"):
        plan_grid(cfg)


def test_a_tier_key_is_still_accepted() -> None:
    tiers = TiersConfig(name="t", order=["hbm"], hbm=TierConfig(capacity=[8], policy=["LRU"]))
    assert len(plan_grid(SweepConfig(tiers=tiers))) == 1


@pytest.mark.parametrize(
    ("typed", "fragment"),
    [
        (["unhashed_free=back"], "invalid unhashed_free='back': applies to semantics=vllm only"),
        (["cache_output_blocks=true"], "invalid cache_output_blocks=True: applies to semantics"),
    ],
)
def test_a_semantics_option_with_tiers_follows_the_semantics_rules(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: list[str],
    fragment: str,
) -> None:  # type: ignore[no-untyped-def]
    # A hierarchy takes the engines' semantics (docs/semantics.md, "In a hierarchy"): an
    # option no semantics of the grid has is refused as for a single cache, never ignored.
    assert_refused(cli, tmp_path, ["tiers=hbm_dram", *typed], fragment)


def test_a_hierarchy_takes_every_semantics_and_option() -> None:
    from prefixsim import Semantics

    tiers = TiersConfig(name="t", order=["hbm"], hbm=TierConfig(capacity=[8]))
    cfg = SweepConfig(
        tiers=tiers,
        semantics=["spec", "vllm", "sglang"],
        unhashed_free=["front", "back"],
        cache_output_blocks=[True],
    )
    assert [gp.semantics for gp in plan_grid(cfg)] == [
        Semantics("spec"),
        Semantics("vllm", "front", True),
        Semantics("vllm", "back", True),
        Semantics("sglang", cache_output_blocks=True),
    ]


# --- Partly 12: hardware keys and cache_tier were checked only with a model -----------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["hardware.mfu=1e-320"], "mfu"),
        (["hardware.mfu=2"], "mfu"),
        (["hardware.n_gpus=0"], "n_gpus"),
        (["hardware.bandwidth.hbm=1e-320"], "bandwidth"),
        (["hardware.peak_flops.bf16=1e40"], "peak_flops"),
        (["hardware.compute_dtype=fp64"], "compute_dtype"),
        (["cache_tier=hbmm"], "cache_tier='hbmm'"),
        (["hardware=null", "cache_tier=hbmm"], "cache_tier='hbmm'"),
        (["hardware=a100", "hardware.mfu=0"], "mfu"),
    ],
)
def test_hardware_values_are_checked_without_a_model(
    cli,  # noqa: F811
    tmp_path: Path,
    args: list[str],
    needle: str,
) -> None:  # type: ignore[no-untyped-def]
    assert_refused(cli, tmp_path, ["capacity=8", "policy=LRU", *args], needle)


def test_a_hardware_profile_file_and_an_override_agree(
    cli,  # noqa: F811
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    from prefixsim.models import profile_dir

    conf = tmp_path.parent / f"{tmp_path.name}-conf"
    (conf / "hardware").mkdir(parents=True)
    text = (profile_dir("hardware") / "h100.yaml").read_text()
    (conf / "hardware" / "tiny.yaml").write_text(text.replace("mfu: 0.5", "mfu: 1e-320"))
    assert_refused(cli, tmp_path, ["--config-dir", str(conf), "hardware=tiny", "capacity=8"], "mfu")
    assert_refused(cli, tmp_path, ["hardware.mfu=1e-320", "capacity=8"], "mfu")


def test_the_api_checks_the_hardware_without_a_model() -> None:
    import dataclasses

    import prefixsim
    from prefixsim.hardware import load_hardware
    from sweep.config import HardwareConfig

    with pytest.raises(prefixsim.ParameterError, match="cache_tier='hbmm'"):
        plan_grid(SweepConfig(capacity=[8], cache_tier="hbmm"))
    bad = HardwareConfig(**{**dataclasses.asdict(load_hardware("h100")), "mfu": 1e-320})
    with pytest.raises(prefixsim.ParameterError, match="mfu"):
        plan_grid(SweepConfig(capacity=[8], hardware=bad))


# --- Partly 11: a quoted number was converted (model.layers="32"), a quoted "true" refused ----

TYPED_KEYS = [(k, tp) for k, tp in SCHEMA_KEYS if tp in (int, float, bool, list[int], list[float])]


def _a_value(tp: object) -> str:
    return "true" if tp is bool else "7"


@pytest.mark.parametrize(("key", "tp"), TYPED_KEYS, ids=[k for k, _ in TYPED_KEYS])
@pytest.mark.parametrize("quote", ['"', "'"])
def test_every_typed_key_refuses_a_quoted_value_by_one_rule(
    key: str, tp: object, quote: str
) -> None:
    value = _a_value(tp)
    with pytest.raises(ArgvError) as info:
        rewrite_override(f"{key}={quote}{value}{quote}")
    assert f"{value!r} is a quoted string; {key} takes" in str(info.value)
    rewrite_override(f"{key}={value}")  # unquoted: accepted


@pytest.mark.parametrize("typed", ['capacity=8,"16"', "small_ratio=[0.1,'0.2']"])
def test_a_quoted_element_of_a_list_is_refused(typed: str) -> None:
    with pytest.raises(ArgvError, match="is a quoted string"):
        rewrite_override(typed)


def test_string_keys_still_take_quoted_strings() -> None:
    rewrite_override('out_dir="outputs/my run"')
    rewrite_override("chat_template='plain'")


# --- Partly 5: out_dir=outputs/latest made latest a real folder, stale ever after -----------


@pytest.mark.parametrize(
    "out_dir", ["outputs/latest", "./outputs/latest/", "outputs//latest", "outputs/latest/x", "ABS"]
)
def test_out_dir_cannot_make_latest_a_folder(cli, tmp_path: Path, out_dir: str) -> None:  # noqa: F811  # type: ignore[no-untyped-def]
    out_dir = out_dir.replace("ABS", str(tmp_path / "outputs" / "latest"))
    assert_refused(
        cli, tmp_path, [f"out_dir={out_dir}", "capacity=8"], "outputs/latest is the link"
    )


def test_latest_through_its_link_is_a_resume(tmp_path: Path) -> None:
    from sweep.lifecycle import check_not_latest

    (tmp_path / "outputs" / "run1").mkdir(parents=True)
    (tmp_path / "outputs" / "latest").symlink_to("run1", target_is_directory=True)
    check_not_latest("outputs/latest", tmp_path)  # accepted


def test_a_latest_folder_is_said_not_silently_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from sweep.lifecycle import update_latest

    run = tmp_path / "outputs" / "run1"
    run.mkdir(parents=True)
    (tmp_path / "outputs" / "latest").mkdir()
    with caplog.at_level("WARNING", logger="sweep"):
        assert update_latest(run, tmp_path) is None
    assert "latest is not a link" in caplog.text
