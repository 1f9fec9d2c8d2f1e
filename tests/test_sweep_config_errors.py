"""Bad configuration input to ``python -m sweep``: one line, exit status 2, nothing created.

Issue 21 ("Hydra's messages for the commonest typos") and issue 22 (the Hydra edge cases):
a key the schema lacks names the closest key, a value of the wrong type names the expected
type, for every key of the structured configuration (nested ones too); interpolations that do
not resolve, ``GROUP=null``, ``range()`` of step 0, an unquoted non-ASCII path and config
files that are not valid are one line too. The command runs in this process
(:func:`sweep.__main__.main`) in an empty folder; the error is the last line of stderr.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from sweep.argv import ArgvError, rewrite_override
from sweep.config import SweepConfig


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``python -m sweep ARGS plot=false`` in this process, in the empty folder ``tmp_path``:
    (exit status, the non-empty lines of stderr)."""
    from sweep.__main__ import main

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, list[str]]:
        capsys.readouterr()
        code = main([*args, "plot=false"])
        captured = capsys.readouterr()
        run.out = captured.out  # type: ignore[attr-defined]
        return code, [line for line in captured.err.splitlines() if line.strip()]

    return run


def assert_refused(cli, cwd: Path, args: list[str], *needles: str) -> str:  # type: ignore[no-untyped-def]
    code, lines = cli(*args)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("sweep: error: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not any(cwd.iterdir())  # nothing created
    return lines[0]


@pytest.mark.parametrize(
    ("typed", "needle"),
    [
        ("smallratio=0.2", "smallratio: not a key of the sweep configuration; did you mean"),
        ("capcity=5", "did you mean capacity?"),
        ("+smallratio=0.2", "did you mean small_ratio?"),
        ("tiers.hbm.capcity=3", "did you mean tiers.hbm.capacity?"),
        ("tiers.dram.polcy=LRU", "did you mean tiers.dram.policy?"),
        ("executor.n_jbs=2", "did you mean executor.n_jobs?"),
        ("model.layrs=3", "did you mean model.layers?"),
        ("hardware.mfuu=0.4", "did you mean hardware.mfu?"),
        ("plot.formts=[png]", "did you mean plot.formats?"),
        ("capacity=abc", "'abc' is not an integer; capacity takes integers"),
        ("small_ratio=x", "'x' is not a number"),
        ("capacity=1024,abc", "'abc' is not an integer"),
        ("chain=2", "chain=2: expected true or false"),
        ("save_per_request=maybe", "expected true or false"),
        ("executor.backend=spark", "one of loky, threading, dask"),
        ("hardware.peak_flops.bf16=abc", "hardware.peak_flops.bf16=abc: expected a number"),
        ("tiers.hbm.capacity=abc", "'abc' is not an integer; tiers.hbm.capacity takes"),
        ("block_size=null", "block_size takes integers"),
        ("plot=abc", "plot=abc: expected a mapping of its keys (enabled, formats"),
        ("capacity=range(1,10,0)", "range() needs a step other than 0"),
        ("small_ratio=range(0.1,0.5,0)", "range() needs a step other than 0"),
        ("out_dir=/tmp/ré", "quote the value: out_dir='/tmp/ré'"),
        ("capacity=[1,2", "Hydra cannot parse this override"),
    ],
)
def test_a_bad_override_is_one_line_naming_the_key_or_the_type(
    cli, tmp_path: Path, typed: str, needle: str
) -> None:  # type: ignore[no-untyped-def]
    line = assert_refused(cli, tmp_path, [typed], needle)
    assert "reference_type" not in line and "+smallratio" not in line.replace(f"'{typed}'", "")


def _schema_keys(cls: type = SweepConfig, prefix: str = "") -> list[tuple[str, typing.Any]]:
    """Every leaf key of the schema and its type, nested nodes included (tiers.hbm.capacity)."""
    out = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = args[0] if len(args) == 1 and typing.get_origin(tp) is not list else tp
        if dataclasses.is_dataclass(inner):
            out.extend(_schema_keys(inner, f"{prefix}{f.name}."))  # type: ignore[arg-type]
        else:
            out.append((f"{prefix}{f.name}", inner))
    return out


SCHEMA_KEYS = _schema_keys()


def test_the_schema_walk_covers_the_nested_nodes() -> None:
    keys = {k for k, _ in SCHEMA_KEYS}
    assert {"capacity", "tiers.hbm.capacity", "tiers.ssd.small_ratio", "model.layers"} <= keys
    assert {"executor.n_jobs", "hardware.mfu", "plot.formats"} <= keys


@pytest.mark.parametrize("key", [k for k, _ in SCHEMA_KEYS])
def test_every_key_misspelt_names_itself(key: str) -> None:
    head, _, leaf = key.rpartition(".")
    typo = f"{head}.{leaf}x" if head else f"{leaf}x"
    with pytest.raises(ArgvError, match=f"did you mean {key}\\?"):
        rewrite_override(f"{typo}=1")


NUMERIC = [k for k, tp in SCHEMA_KEYS if tp in (int, float, bool, list[int], list[float])]


@pytest.mark.parametrize("key", NUMERIC)
def test_every_numeric_key_refuses_a_word_naming_its_type(key: str) -> None:
    with pytest.raises(ArgvError) as info:
        rewrite_override(f"{key}=abc")
    message = str(info.value)
    assert message.startswith(f"{key}=abc: ")
    assert any(w in message for w in ("an integer", "a number", "true or false")), message


def test_valid_overrides_pass_unchanged_or_in_list_form() -> None:
    assert rewrite_override("capacity=1024") == "capacity=[1024]"
    assert rewrite_override("chain=true") == "chain=true"
    assert rewrite_override("tiers.hbm.capacity=2048,4096") == "tiers.hbm.capacity=[2048,4096]"
    assert rewrite_override("hardware.peak_flops.bf16=1e15") == "hardware.peak_flops.bf16=1e15"
    assert rewrite_override("trace=2024") == "trace=[2024]"  # a file named 2024: a string
    assert rewrite_override("+experiment=capacity_curve") == "+experiment=capacity_curve"
    assert rewrite_override("hydra.verbose=true") == "hydra.verbose=true"


@pytest.mark.parametrize("group", ["hardware", "model", "tiers", "executor"])
def test_group_null_means_no_choice(group: str) -> None:
    assert rewrite_override(f"{group}=null") == f"~{group}"


def test_hardware_null_runs_without_hardware(cli) -> None:  # type: ignore[no-untyped-def]
    code, lines = cli("--cfg", "job", "hardware=null", "model=null", "tiers=null")
    assert code == 0, lines
    for group in ("hardware", "model", "tiers"):
        assert f"\n{group}: null\n" in f"\n{cli.out}"


@pytest.mark.parametrize(
    ("typed", "needles"),
    [
        ("capacity=${oc.env:HOME}", ["capacity[0]=${oc.env:HOME}", "could not be converted"]),
        ("out_dir=${oc.env:PREFIXSIM_UNSET_VARIABLE}", ["out_dir=${oc.env:", "not found"]),
        ("out_dir=${out_dir}", ["out_dir=${out_dir}", "Recursive interpolation"]),
    ],
)
def test_an_interpolation_that_fails_is_one_line(
    cli, tmp_path: Path, typed: str, needles: list[str]
) -> None:  # type: ignore[no-untyped-def]
    line = assert_refused(cli, tmp_path, [typed], *needles)
    assert "Error executing job" not in line


def test_config_files_that_are_wrong_are_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    mine = tmp_path.parent / f"{tmp_path.name}-conf"
    (mine / "experiment").mkdir(parents=True)
    (mine / "model").mkdir()
    (mine / "experiment" / "typo.yaml").write_text("# @package _global_\ncapcity: [3]\n")
    (mine / "model" / "broken.yaml").write_text("name: x\nlayers: [\n")
    (mine / "model" / "partial.yaml").write_text("name: x\nlayers: 3\n")
    cd = ["--config-dir", str(mine)]
    assert_refused(cli, tmp_path, [*cd, "+experiment=typo"], "'capcity'", "did you mean capacity?")
    assert_refused(cli, tmp_path, [*cd, "model=broken"], "broken.yaml: invalid YAML", "line 3")
    assert_refused(
        cli, tmp_path, [*cd, "model=partial"], "partial.yaml: attention_heads", "missing"
    )
    assert_refused(cli, tmp_path, ["executor=nope"], "Available options in 'executor': dask, loky")
    assert_refused(cli, tmp_path, ["experiment=capacity_curve"], "use +experiment=capacity_curve")


def test_a_quoted_non_ascii_path_is_taken(cli) -> None:  # type: ignore[no-untyped-def]
    code, lines = cli("--cfg", "job", "out_dir='/tmp/ré'")
    assert code == 0, lines
    assert "out_dir: /tmp/ré" in cli.out


def _null_node_cases() -> list[tuple[list[str], str]]:
    """Every leaf key under a node that is null once the defaults are composed, each with one
    way of making it null and one way of setting it (plain, ``+``, ``++``): ``model`` and
    ``tiers`` (null by default), ``hardware`` (``hardware=null``), and the tiers a hierarchy
    leaves null (``tiers=hbm_dram``: rdma, ssd)."""
    cases: list[tuple[list[str], str]] = []
    prefixes = ["", "+", "++"]
    nulls = {
        "model.": ([], "model"),
        "hardware.": (["hardware=null"], "hardware"),
        "tiers.": (["tiers=null"], "tiers"),
        "tiers.rdma.": (["tiers=hbm_dram"], "tiers.rdma"),
        "tiers.ssd.": (["tiers=hbm_dram"], "tiers.ssd"),
    }
    for i, (key, tp) in enumerate(SCHEMA_KEYS):
        node = max((p for p in nulls if key.startswith(p)), key=len, default=None)
        if node is None:
            continue
        before, name = nulls[node]
        if node == "tiers." and i % 2:
            before = []  # tiers is null by default too
        value = "1" if tp in (int, float, list[int], list[float]) else "x"
        value = "true" if tp is bool else f"[{value}]" if typing.get_origin(tp) is list else value
        if key.endswith(("peak_flops", "bandwidth")):  # a key of each table
            key, value = f"{key}.{'bf16' if key.endswith('peak_flops') else 'hbm'}", "1e15"
        cases.append(([*before, f"{prefixes[i % 3]}{key}={value}"], name))
    return cases


NULL_NODE_CASES = _null_node_cases()


def test_the_null_node_family_covers_every_group() -> None:
    nodes = {name for _, name in NULL_NODE_CASES}
    assert nodes == {"model", "hardware", "tiers", "tiers.rdma", "tiers.ssd"}
    assert len(NULL_NODE_CASES) > 40


@pytest.mark.parametrize(("args", "node"), NULL_NODE_CASES, ids=lambda x: str(x))
def test_a_key_under_a_null_node_is_one_line_naming_the_node(
    cli, tmp_path: Path, args: list[str], node: str
) -> None:  # type: ignore[no-untyped-def]
    # main's code: OmegaConf's "AssertionError: Unexpected type: None", a 30-line traceback
    line = assert_refused(cli, tmp_path, args, f"{args[-1]}: ")
    if "." in node:
        assert f"{node} is null in this configuration" in line, line
    else:
        assert f"no {node} is chosen" in line and f"{node}=NAME" in line, line


def test_a_mapping_merged_into_a_null_node_is_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert_refused(
        cli, tmp_path, ["tiers=hbm_dram", "tiers.rdma={capacity:[5]}"], "tiers.rdma is null"
    )


def test_a_key_under_a_group_an_experiment_chooses_is_set(cli) -> None:  # type: ignore[no-untyped-def]
    # the choice comes from the experiment's defaults list (override /model: ...), not argv
    code, lines = cli("--cfg", "job", "+experiment=llama70b_dram_pool", "model.layers=32")
    assert code == 0, lines
    assert "  layers: 32\n" in cli.out
