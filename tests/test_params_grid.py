"""Planning a grid: make_params_grid against make_params per point, point keys against
point_key and hand-written documents, and the work a 100,000-point plan does."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import prefixsim
import prefixsim.params_grid as params_grid
from prefixsim import ParameterError, make_params, policy_names
from prefixsim.params_grid import make_params_grid
from prefixsim.policies.base import PolicyParams
from prefixsim.policies.s3fifo import S3FIFOParams
from sweep.config import SweepConfig
from sweep.grid import GridPoint, assign_points, plan_grid, point_key, point_keys

SHA = "ab" * 32


def reference(policy: str, capacities: list[Any], combos: list[dict[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for capacity in capacities:
        for combo in combos:
            try:
                out.append(make_params(policy, capacity, **combo))
            except ParameterError as err:
                out.append(err)
    return out


def same(a: Any, b: Any) -> bool:
    """Equal parameters with fields of the same types, or errors with the same message."""
    if isinstance(a, ParameterError) or isinstance(b, ParameterError):
        return type(a) is type(b) and str(a) == str(b)
    fields = [f.name for f in dataclasses.fields(a)]
    return type(a) is type(b) and all(
        getattr(a, n) == getattr(b, n) and type(getattr(a, n)) is type(getattr(b, n))
        for n in fields
    )


# Values that pass, fail, or pass after normalisation (numpy integers, ints for a ratio).
CAPACITIES = st.one_of(
    st.integers(-2, 40),
    st.sampled_from([1.0, 2.5, True, "8", np.int64(9), np.int32(1), 2**40]),
)
RATIOS = st.sampled_from([0.1, 0.5, 0.97, 0.0, 1.0, -0.0, 1, True, np.float64(0.25), "0.1", None])
FREQS = st.one_of(st.integers(-1, 5), st.sampled_from([2.0, True, np.int64(2), None]))


@st.composite
def combos(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = ("small_ratio", "max_freq", "ghost_freq")
    out = []
    for _ in range(draw(st.integers(1, 3))):
        combo: dict[str, Any] = {}
        for key in keys:
            if draw(st.booleans()):
                combo[key] = draw(RATIOS if key == "small_ratio" else FREQS)
        out.append(combo)
    return out


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from(policy_names()),
    capacities=st.lists(CAPACITIES, min_size=1, max_size=12),
    combos=combos(),
)
def test_grid_equals_make_params_per_point(
    policy: str, capacities: list[Any], combos: list[dict[str, Any]]
) -> None:
    got = make_params_grid(policy, capacities, combos)
    want = reference(policy, capacities, combos)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert same(g, w), (g, w)


def test_first_failing_rule_is_the_error_as_in_construction() -> None:
    # capacity=1 with small_ratio=0.1: round(0.1) = 0 leaves S empty (rule 3) although
    # max_freq=-1 (rule 4) is wrong too; rule order decides, as in S3FIFOParams(...)
    [err] = make_params_grid("S3FIFO", [1], [{"small_ratio": 0.1, "max_freq": -1}])
    assert isinstance(err, ParameterError) and "leaves S empty" in str(err)
    # ghost_freq is checked against the normalised max_freq: [0, 1]
    [err] = make_params_grid("S3FIFO", [10], [{"max_freq": np.int64(1), "ghost_freq": 2}])
    assert isinstance(err, ParameterError) and "integer in [0, 1]" in str(err)


def test_a_params_class_with_its_own_post_init_is_built_point_by_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Counter[str]()

    @dataclasses.dataclass(frozen=True)
    class EvenParams(PolicyParams):
        policy: ClassVar[str] = "EVEN"

        def __post_init__(self) -> None:  # validates outside `checks`
            super().__post_init__()
            calls["post_init"] += 1
            if self.capacity % 2:
                raise ParameterError("capacity", self.capacity, "expected an even number")

    spec = dataclasses.replace(prefixsim.get_policy("LRU"), name="EVEN", params_type=EvenParams)
    monkeypatch.setitem(prefixsim.policies.base._REGISTRY, "EVEN", spec)
    got = make_params_grid("EVEN", [2, 3, 4])
    assert [type(g) for g in got] == [EvenParams, ParameterError, EvenParams]
    assert calls["post_init"] == 3


def counting(monkeypatch: pytest.MonkeyPatch, cls: type[PolicyParams]) -> Counter[str]:
    """Count the calls of each of ``cls``'s rules (by rule name) and of make_params."""
    calls = Counter[str]()

    def wrap(name: str, rule: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            calls[name] += 1
            return rule(*args)

        return counted

    checks = tuple((reads, wrap(rule.__name__, rule)) for reads, rule in cls.checks)
    monkeypatch.setattr(cls, "checks", checks)
    real = params_grid.make_params

    def make(*args: Any, **kwargs: Any) -> Any:
        calls["make_params"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(params_grid, "make_params", make)
    return calls


def test_a_100000_point_plan_runs_each_rule_once_per_distinct_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting(monkeypatch, S3FIFOParams)
    capacities = list(range(10, 50_010))  # 50,000 capacities x 2 ratios = 100,000 points
    cfg = SweepConfig(policy=["S3FIFO"], capacity=capacities, small_ratio=[0.1, 0.2])
    points = plan_grid(cfg)
    assert len(points) == 100_000
    assert calls == {
        "_check_capacity": 50_000,  # once per distinct capacity
        "_check_small_ratio": 2,  # once per distinct ratio
        "_check_max_freq": 1,
        "_check_ghost_freq": 1,  # once per distinct (max_freq, ghost_freq)
        "_check_queues": 100_000,  # reads capacity and small_ratio: once per point
    }  # and make_params never
    first, last = points[0].params, points[-1].params
    assert first == S3FIFOParams(10, 0.1, 3, 0) and last == S3FIFOParams(50_009, 0.2, 3, 0)
    keys, _ = assign_points(points, {"conversation": SHA}, {})
    assert len({p.key for p in keys}) == 100_000


def test_an_invalid_point_is_reported_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch, S3FIFOParams)
    cfg = SweepConfig(policy=["S3FIFO"], capacity=[64, 2, 4096, 1], trace=["a", "b"])
    # capacity 2 and 1 are invalid for each of the two traces: 4 invalid points
    with pytest.raises(prefixsim.PrefixSimError, match=r"\(4 invalid points; first: .*capacity=2"):
        plan_grid(cfg)
    assert calls["make_params"] == 2  # the invalid points only, for their errors


# --- point keys --------------------------------------------------------------------------------


def digest(document: str) -> str:
    return hashlib.sha256(document.encode()).hexdigest()[:20]


def test_point_keys_are_the_documented_digest() -> None:
    """Keys written out by hand from point_key's definition (sorted keys, no spaces): a changed
    key would orphan every existing run directory."""
    lru = make_params("LRU", 1024)
    s3 = make_params("S3FIFO", 4096, small_ratio=0.05, max_freq=1, ghost_freq=1)
    cases = [
        (
            GridPoint("t", lru, 512),
            {},
            f'{{"block_size":512,"capacity":1024,"policy":"LRU","trace_sha256":"{SHA}"}}',
        ),
        (
            GridPoint("t", s3, 256),
            {},
            '{"block_size":256,"capacity":4096,"ghost_freq":1,"max_freq":1,"policy":"S3FIFO",'
            f'"small_ratio":0.05,"trace_sha256":"{SHA}"}}',
        ),
        (
            GridPoint("t", lru, 16, cache_bytes=2**40),
            {"model": "m", "dtype_bytes": 2},
            '{"block_size":16,"cache_bytes":1099511627776,"capacity":1024,"dtype_bytes":2,'
            f'"model":"m","policy":"LRU","trace_sha256":"{SHA}"}}',
        ),
    ]
    for gp, identity, document in cases:
        want = digest(document)
        assert (
            point_key(
                SHA, gp.params, gp.block_size, cache_bytes=gp.cache_bytes, cost_identity=identity
            )
            == want
        )
        assert point_keys([gp], {"t": SHA}, identity) == [(SHA, want)]


@settings(max_examples=100, deadline=None)
@given(
    policies=st.lists(st.sampled_from(policy_names()), min_size=1, max_size=3),
    capacities=st.lists(st.integers(2, 3000), min_size=1, max_size=20),
    ratios=st.lists(st.sampled_from([0.1, 0.25, 0.5]), min_size=1, max_size=2),
    block_sizes=st.lists(st.sampled_from([1, 16, 512]), min_size=1, max_size=2),
    cache_bytes=st.booleans(),
    identity=st.sampled_from([None, {}, {"model": "m", "x": 1.5}, {"capacity": 7}]),
)
def test_point_keys_equal_point_key_per_point(
    policies: list[str],
    capacities: list[int],
    ratios: list[float],
    block_sizes: list[int],
    cache_bytes: bool,
    identity: dict[str, Any] | None,
) -> None:
    cfg = SweepConfig(
        trace=["a", "b"],
        policy=policies,
        capacity=capacities,
        small_ratio=ratios,
        block_size=block_sizes,
    )
    try:
        grid = plan_grid(cfg)
    except prefixsim.PrefixSimError:
        return  # e.g. a ratio that leaves a queue empty at a small capacity
    if cache_bytes:
        grid = [dataclasses.replace(gp, cache_bytes=gp.params.capacity * 3) for gp in grid]
    shas = {"a": SHA, ("b", block_sizes[0]): "cd" * 32, "b": "ef" * 32}
    got = point_keys(grid, shas, identity)
    for gp, (sha, key) in zip(grid, got, strict=True):
        assert sha == (shas.get((gp.trace, gp.block_size)) or shas[gp.trace])
        want = point_key(
            sha, gp.params, gp.block_size, cache_bytes=gp.cache_bytes, cost_identity=identity
        )
        assert key == want


def test_equal_but_differently_typed_values_are_different_inputs() -> None:
    # 1 == 1.0 == True, but max_freq=1 is valid, 1.0 (not an integer) and True (a boolean) not
    got = make_params_grid("S3FIFO", [10], [{"max_freq": 1}, {"max_freq": 1.0}, {"max_freq": True}])
    assert isinstance(got[0], S3FIFOParams) and got[0].max_freq == 1
    assert "integer in [0, " in str(got[1]) and "not a boolean" in str(got[2])


def test_points_whose_fields_render_differently_do_not_share_a_template() -> None:
    # Parameters built without checks can hold 1 or True (equal, hashed alike): JSON writes
    # 1 and true, so the keys differ.
    one = S3FIFOParams.unchecked(
        {"capacity": 10, "small_ratio": 0.5, "max_freq": 1, "ghost_freq": 0}
    )
    true = S3FIFOParams.unchecked(
        {"capacity": 11, "small_ratio": 0.5, "max_freq": True, "ghost_freq": 0}
    )
    grid = [GridPoint("t", one, 512), GridPoint("t", true, 512)]
    keys = [key for _, key in point_keys(grid, {"t": SHA}, None)]
    assert keys == [point_key(SHA, gp.params, 512) for gp in grid]
    assert keys[1] == digest(
        '{"block_size":512,"capacity":11,"ghost_freq":0,"max_freq":true,"policy":"S3FIFO",'
        f'"small_ratio":0.5,"trace_sha256":"{SHA}"}}'
    )


# --- the run directory's config.yaml of a sweep started from Python ------------------------------


def test_long_ranges_are_written_compactly_and_read_back_whole() -> None:
    from omegaconf import OmegaConf

    from sweep import ranges
    from sweep.config import GRID_KEYS

    assert ranges.compact_list("capacity", list(range(5, 3005, 3))) == "${sweep_range:5,3005,3}"
    assert ranges.compact_list("capacity", list(range(1, 100))) is None  # short: a list
    assert ranges.compact_list("capacity", [*range(1, 2000), 5000]) is None  # not a range
    assert ranges.compact_list("capacity", [True, *range(1, 2000)]) is None  # not all ints
    assert ranges.compact_list("small_ratio", list(range(1, 2000))) is None  # not an int key
    cfg = SweepConfig(capacity=list(range(1, 100_001)), policy=["LRU"])
    text = ranges.structured_yaml(cfg, GRID_KEYS)
    assert "capacity: ${sweep_range:1,100001,1}" in text.splitlines()
    ranges.register_resolver()
    assert list(OmegaConf.create(text).capacity) == cfg.capacity
    small = SweepConfig(capacity=[1, 2, 3])
    assert ranges.structured_yaml(small, GRID_KEYS) == OmegaConf.to_yaml(
        OmegaConf.structured(small)
    )
