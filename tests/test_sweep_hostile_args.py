"""Hostile values on the sweep's command line and in its config files (the audit of issues 21
and 22): each is one line, exit status 2, nothing created, before any value list is built.

The command runs in this process in an empty folder (the fixtures of
``test_sweep_config_errors``); the cases are families, not the audit's examples alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sweep import ranges
from sweep.argv import ArgvError, rewrite_override
from sweep.config import SweepConfig
from sweep.grid import PlanError, grid_size_bound, plan_grid
from test_sweep_config_errors import SCHEMA_KEYS, assert_refused, cli  # noqa: F401

# --- ranges: counted before they are listed (a billion values was a MemoryError) -----------

HUGE_RANGES = [
    "capacity=range(1,3000000000)",
    "capacity=range(1,30000000)",
    "capacity=range(0,10000000000000000000000,7)",
    "capacity=range(3000000000,1,-1)",
    "capacity=shuffle(range(1,30000000))",
    "capacity=range(1,1e10)",
    "block_size=range(1,30000000)",
    "seed=range(0,30000000)",
    "max_freq=range(1,30000000)",
    "vnodes=range(1,30000000)",
    "small_ratio=range(0.1,0.5,1e-300)",
    "small_ratio=range(0.0,1.0,1e-8)",
    "small_ratio=range(0.5,0.1,-1e-9)",
    "overlap_weight=range(0,1,1e-12)",
    "tiers.hbm.capacity=range(1,30000000)",
]


@pytest.mark.parametrize("typed", HUGE_RANGES)
def test_a_range_past_the_grid_bound_is_refused_with_the_memory_it_needs(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: str,
) -> None:  # type: ignore[no-untyped-def]
    args = ["tiers=hbm_dram", typed] if typed.startswith("tiers.") else [typed]
    line = assert_refused(cli, tmp_path, args, f"'{typed}': the range has ", "at most 10,000,000")
    assert "GiB" in line or "TiB" in line or "PiB" in line, line


@pytest.mark.parametrize(
    ("typed", "needle"),
    [
        ("small_ratio=range(0.1,nan,0.1)", "its stop is nan"),
        ("small_ratio=range(0.1,inf,0.1)", "its stop is inf"),
        ("small_ratio=range(-inf,0.5,0.1)", "its start is -inf"),
        ("small_ratio=range(nan,0.5,0.1)", "its start is nan"),
        ("small_ratio=range(0.1,0.5,nan)", "its step is nan"),
        ("small_ratio=range(0.1,0.5,inf)", "its step is inf"),
        ("capacity=range(1,inf)", "its stop is inf"),
        ("seed=range(1,10,nan)", "its step is nan"),
        ("small_ratio=range(0.1,0.5,0)", "a step other than 0"),
        ("capacity=range(1,10,0)", "a step other than 0"),
    ],
)
def test_a_range_with_a_bound_that_is_not_finite_is_one_line(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: str,
    needle: str,
) -> None:  # type: ignore[no-untyped-def]
    assert_refused(cli, tmp_path, [typed], f"'{typed}': range() needs", needle)


@pytest.mark.parametrize(
    "typed",
    ["capacity=${sweep_range:1,3000000000,1}", "small_ratio=${sweep_range:0.1,0.5,1e-300}"],
)
def test_a_compact_range_typed_as_such_is_bounded_too(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: str,
) -> None:  # type: ignore[no-untyped-def]
    line = assert_refused(cli, tmp_path, [typed], "the range has ", "at most 10,000,000")
    assert "raised while resolving" not in line, line


def test_the_count_is_the_length_of_the_range_it_stands_for() -> None:
    # independent of the bound: the count of every small range equals len(list(values))
    cases = [(1, 10, 1), (10, 1, -3), (1, 1, 1), (5, 1, 1), (0.1, 0.5, 0.1), (0.5, 0.1, -0.05)]
    cases += [(0.05, 0.3, 0.05), (1, 2.5, 0.5), (-3, 3, 2)]
    for start, stop, step in cases:
        assert ranges.count(start, stop, step) == len(ranges.expand(start, stop, step))
    assert ranges.count(1, 10_000_001) == 10_000_000  # the bound itself is allowed
    with pytest.raises(ranges.RangeError):
        ranges.count(1, 10_000_002)


# --- the grid: its product bounded before any point is built ---------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["capacity=range(2,5000)", "block_size=range(1,5000)"],
        [
            "policy=S3FIFO",
            "capacity=range(10,5000)",
            "small_ratio=range(0.1,0.9,0.01)",
            "max_freq=range(1,100)",
        ],
        ["router=random", "instances=range(1,4000)", "seed=range(1,4000)"],
        ["tiers=hbm_dram", "tiers.hbm.capacity=range(1,5000)", "tiers.dram.capacity=range(1,5000)"],
    ],
)
def test_a_grid_past_the_bound_is_refused_before_planning(
    cli,  # noqa: F811
    tmp_path: Path,
    args: list[str],
) -> None:  # type: ignore[no-untyped-def]
    assert_refused(cli, tmp_path, args, "the grid has ", "points; a grid holds at most 10,000,000")


def test_the_grid_bound_counts_what_plan_grid_builds() -> None:
    # a parameter a policy lacks does not multiply it (LRU has no small_ratio)
    cfg = SweepConfig(
        capacity=[64, 128, 256], policy=["S3FIFO", "LRU"], small_ratio=[0.1, 0.2], block_size=[4, 8]
    )
    assert grid_size_bound(cfg) == len(plan_grid(cfg)) == 3 * 2 * (2 + 1)


def test_the_api_is_bounded_like_the_command_line() -> None:
    cfg = SweepConfig(capacity=list(range(2, 5002)), block_size=list(range(1, 3001)))
    with pytest.raises(PlanError, match="the grid has 30,000,000 points"):
        plan_grid(cfg)


# --- numbers past Python's integer-string limit (4300 digits): one line, not a traceback ----

LONG = "9" * 5000


@pytest.mark.parametrize("key", [k for k, _ in SCHEMA_KEYS])
def test_a_long_number_in_any_key_is_one_line(key: str) -> None:
    # Hydra's parser calls int() on the digits whatever the key's type (out_dir too)
    with pytest.raises(ArgvError) as info:
        rewrite_override(f"{key}={LONG}")
    message = str(info.value)
    assert "a number of 5,000 digits, longer than Python reads" in message, message
    assert len(message) < 400, message


@pytest.mark.parametrize(
    "typed",
    [
        f"capacity=[1,{LONG}]",
        f"capacity=1,{LONG}",
        f"capacity=range(1,{LONG})",
        f"capacity=-{LONG}",
        f"+capacity={LONG}",
        f"++seed={LONG}",
        f"cache_size={LONG}",
        f"hydra.job.chdir={LONG}",
        f"+foo={LONG}",
    ],
    ids=lambda typed: typed.replace(LONG, "9*5000"),
)
def test_a_long_number_in_any_form_is_one_line(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: str,
) -> None:  # type: ignore[no-untyped-def]
    assert_refused(cli, tmp_path, [typed], "a number of 5,000 digits, longer than Python reads")


def test_a_long_number_quoted_is_text(cli) -> None:  # noqa: F811  # type: ignore[no-untyped-def]
    code, lines = cli("--cfg", "job", f"out_dir='{LONG}'")
    assert code == 0, lines


def _experiment(root: Path, name: str, body: bytes) -> Path:
    folder = root / "d" / "experiment"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_bytes(b"# @package _global_\n" + body)
    return path


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (f"capacity: [{LONG}]\n".encode(), 2),
        (f"policy: [LRU]\nseed: [1, {LONG}]\n".encode(), 3),
        (f"plot:\n  dpi: {LONG}\n".encode(), 3),
        (f"out_dir: {LONG}\n".encode(), 2),
    ],
    ids=["capacity", "seed", "plot.dpi", "out_dir"],
)
def test_a_long_number_in_a_config_file_names_the_file_and_line(
    cli,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    body: bytes,
    line: int,
) -> None:  # type: ignore[no-untyped-def]
    # main's code: OmegaConf's YAML loader's ValueError, a 60-line traceback naming no file
    outside = tmp_path.parent / f"{tmp_path.name}-cfg"
    path = _experiment(outside, "big", body)
    assert_refused(
        cli,
        tmp_path,
        ["--config-dir", str(outside / "d"), "+experiment=big"],
        f"{path}:{line}: a number of 5,000 digits",
    )


@pytest.mark.parametrize(
    ("body", "line", "byte"),
    [
        (b"\xff\xfe", 2, "0xff"),
        (b"capacity: [1024]\npolicy: [LRU, '\xe9']\n", 3, "0xe9"),
        (b"capacity: [1024]\n" * 1000 + b"# \xc3\x28\n", 1002, "0xc3"),  # past a read chunk
    ],
    ids=["first-byte", "third-line", "past-a-read-chunk"],
)
def test_a_config_file_that_is_not_utf8_names_the_file_and_line(
    cli,  # noqa: F811
    tmp_path: Path,
    body: bytes,
    line: int,
    byte: str,
) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path.parent / f"{tmp_path.name}-cfg"
    path = _experiment(outside, "x", body)
    assert_refused(
        cli,
        tmp_path,
        ["--config-dir", str(outside / "d"), "+experiment=x"],
        f"{path}:{line}: not UTF-8 text (byte {byte}",
    )


def test_a_group_file_that_is_not_utf8_names_the_file(cli, tmp_path: Path) -> None:  # noqa: F811  # type: ignore[no-untyped-def]
    outside = tmp_path.parent / f"{tmp_path.name}-cfg"
    (outside / "tiers").mkdir(parents=True)
    path = outside / "tiers" / "t.yaml"
    path.write_bytes(b"order: [hbm]\nhbm:\n  capacity: [4]\n  medium: '\xe9'\n")
    assert_refused(
        cli, tmp_path, ["--config-dir", str(outside), "tiers=t"], f"{path}:4: not UTF-8 text"
    )


@pytest.mark.parametrize("kind", ["model", "hardware"])
@pytest.mark.parametrize(
    "number", [LONG, f"-{LONG}", f"1_{LONG}"], ids=["long", "negative", "underscored"]
)
def test_a_long_number_in_a_profile_is_refused_by_key(
    cli,  # noqa: F811
    tmp_path: Path,
    kind: str,
    number: str,
) -> None:  # type: ignore[no-untyped-def]
    from prefixsim.models import profile_dir

    key = "layers" if kind == "model" else "n_gpus"
    source = profile_dir(kind) / ("llama-3.1-8b.yaml" if kind == "model" else "h100.yaml")
    lines = source.read_text().splitlines()
    assert any(x.startswith(f"{key}:") for x in lines)
    outside = tmp_path.parent / f"{tmp_path.name}-cfg"
    (outside / kind).mkdir(parents=True)
    text = "\n".join(f"{key}: {number}" if x.startswith(f"{key}:") else x for x in lines)
    (outside / kind / "huge.yaml").write_text(text + "\n")
    args = ["--config-dir", str(outside), f"{kind}=huge"]
    if kind == "hardware":
        args.append("model=llama-3.1-8b")
    assert_refused(cli, tmp_path, args, f"{kind}.{key}=<an integer of ")


# --- keys of mappings with a fixed table, and Hydra's own keys: the closest key, not "+KEY" ---


def _table_keys() -> list[str]:
    from prefixsim.hardware import TIERS
    from prefixsim.models import DTYPE_BYTES

    return [f"hardware.bandwidth.{t}" for t in TIERS] + [
        f"hardware.peak_flops.{d}" for d in DTYPE_BYTES
    ]


def _hydra_keys() -> list[str]:
    import dataclasses

    from hydra.conf import HydraConf

    keys = []
    for f in dataclasses.fields(HydraConf):
        tp = f.type if not isinstance(f.type, str) else None
        keys.append(f"hydra.{f.name}")
        inner = getattr(HydraConf, f.name, None) if tp is None else tp
        if dataclasses.is_dataclass(inner):
            keys.extend(f"hydra.{f.name}.{g.name}" for g in dataclasses.fields(inner))
    return keys


@pytest.mark.parametrize("key", _table_keys())
@pytest.mark.parametrize("prefix", ["", "+"])
def test_a_misspelt_key_of_a_hardware_table_names_the_closest(key: str, prefix: str) -> None:
    typo = f"{key}x"
    with pytest.raises(ArgvError, match=f"did you mean {key}\\?"):
        rewrite_override(f"{prefix}{typo}=1e12")
    assert rewrite_override(f"{key}=1e12") == f"{key}=1e12"


@pytest.mark.parametrize("key", _hydra_keys())
def test_a_misspelt_hydra_key_names_the_closest(key: str) -> None:
    head, _, leaf = key.rpartition(".")
    with pytest.raises(ArgvError) as info:
        rewrite_override(f"{head}.{leaf}x=1")
    assert "did you mean" in str(info.value) and "+hydra" not in str(info.value), info.value


def test_hydra_keys_hydra_takes_are_left_to_it(cli) -> None:  # noqa: F811  # type: ignore[no-untyped-def]
    for typed in ("hydra.verbose=true", "hydra.job.chdir=false", "hydra.run.dir=somewhere"):
        code, lines = cli("--cfg", "job", typed)
        assert code == 0, (typed, lines)
