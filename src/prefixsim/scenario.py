"""One scenario of the engine: what a sweep point replays, and the one call that runs it.

A :class:`Scenario` is one of the three compositions, each with its policy parameters and block
size: one cache (``params`` a policy's :class:`~prefixsim.policies.PolicyParams`), a hierarchy of
tiers (``params`` a :class:`~prefixsim.tiers.Hierarchy`), or a cluster of identical caches behind
a router (``cluster`` set; ``params`` each instance's policy). :func:`run_scenario` runs it on a
:class:`~prefixsim.trace.Trace` and returns the composition's result.

>>> from prefixsim import load_trace, make_params
>>> from prefixsim.scenario import Scenario, run_scenario
>>> result = run_scenario(load_trace("conversation"), Scenario(make_params("S3FIFO", 4096)))
>>> result.total_hit_tokens  # doctest: +SKIP

The replay's semantics (the engines' own hit rules, ``docs/semantics.md``) is a value of the
scenario like ``block_size``, which :func:`run_scenario` hands to the composition's replay, the
same for all three (a hierarchy refuses any but ``spec`` for now).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ParameterError
from .mode_replay import check_arrays
from .policies import PolicyParams, get_policy
from .policies.base import check_int
from .replay import MAX_BLOCK_SIZE, Engine, ReplayResult
from .semantics import Semantics
from .tiers import Hierarchy, TieredResult, check_hierarchy, replay_hierarchy
from .trace import Trace

_SPEC = Semantics()
"""The default semantics, the specification's."""

if TYPE_CHECKING:  # the cluster engine is imported where it runs (a sweep without clusters)
    from .cluster import ClusterResult, LoadModel, RouterParams


@dataclass(frozen=True)
class Cluster:
    """The cluster of a scenario: ``instances`` caches behind ``router``, queued by ``load``
    (a model and hardware profile; required by ``least_loaded`` and ``kv_aware``)."""

    instances: int
    router: RouterParams
    load: LoadModel | None = None


@dataclass(frozen=True)
class Scenario:
    """What one replay is: a composition, its policy parameters, its block size, its semantics."""

    params: PolicyParams
    """One cache's policy parameters, or a :class:`~prefixsim.tiers.Hierarchy` (validated)."""
    block_size: int = 512
    cluster: Cluster | None = None
    """None: one cache or a hierarchy; else ``params`` is each instance's policy."""
    semantics: Semantics = _SPEC
    """The replay's hit rule (``docs/semantics.md``); ``spec`` by default."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "block_size", check_int("block_size", self.block_size, 1, MAX_BLOCK_SIZE)
        )
        if not isinstance(self.params, PolicyParams):
            raise ParameterError("params", self.params, "expected a policy's parameters")
        if not isinstance(self.semantics, Semantics):
            raise ParameterError("semantics", self.semantics, "expected a Semantics")
        if self.cluster is not None and isinstance(self.params, Hierarchy):
            raise ParameterError(
                "cluster", self.cluster, "a cluster's instances are single caches, not tiers"
            )

    @property
    def composition(self) -> str:
        """``cache``, ``tiers`` or ``cluster``."""
        if self.cluster is not None:
            return "cluster"
        return "tiers" if isinstance(self.params, Hierarchy) else "cache"


def check_scenario(trace: Trace, scenario: Scenario, *, engine: Engine = "kernel") -> None:
    """Raise what :func:`run_scenario` would refuse ``scenario`` on ``trace`` for, without
    replaying a request or allocating a replay's state: the composition's own checks, the ones
    its replay runs first (:func:`prefixsim.replay.check_replay`,
    :func:`prefixsim.tiers.check_hierarchy`, :func:`prefixsim.cluster.replay.check_cluster`),
    called with the scenario's values. A sweep calls it for its points before it makes the run
    folder (``sweep.engine_checks``); refusals that depend on the hits (none today) would be
    met only by the replay."""
    params, block_size, cluster, sem = (
        scenario.params, scenario.block_size, scenario.cluster, scenario.semantics,
    )  # fmt: skip
    if cluster is not None:
        from .cluster.replay import check_cluster

        check_cluster(
            params, block_size, cluster.instances, cluster.router, cluster.load, trace,
            engine=engine, semantics=sem,
        )  # fmt: skip
        from .cluster.routers import get_router

        spec = get_policy(params.policy)
        if sem.name != "spec":
            # each instance's replay, asked of the whole trace: its requests are the
            # instances' (their state, over fewer blocks, is bounded by the trace's)
            check_arrays(trace, params, block_size, sem, engine)
        elif engine == "kernel" and (
            spec.fast_kernel is None or get_router(cluster.router.router).assign is None
        ):
            spec.compiled_steps(params)  # the steps the instances' replays or the driver run
        return
    if isinstance(params, Hierarchy):
        check_hierarchy(trace, params.tiers, block_size, engine=engine, semantics=sem)
        return
    from .replay import check_replay  # looked up at each call, as replay_params looks it up

    check_replay(trace, params, block_size, engine=engine, semantics=sem)


def run_scenario(
    trace: Trace, scenario: Scenario, *, engine: Engine = "kernel"
) -> ReplayResult | TieredResult | ClusterResult:
    """Replay ``trace`` as ``scenario`` says: the compiled drivers (``engine="kernel"``) or the
    reference drivers (``"reference"``).

    One cache goes through the package's public ``prefixsim.replay_params``, looked up at each
    call and, with the defaults (kernel, ``spec``), called as ``replay_params(trace, params,
    block_size)``: whatever wraps that function (a test planting a refusal, a profiler) sees
    every single-cache replay, whichever entry ran it."""
    params, block_size, cluster = scenario.params, scenario.block_size, scenario.cluster
    semantics = scenario.semantics
    if cluster is not None:
        from .cluster import replay_cluster_params

        return replay_cluster_params(
            trace, params, block_size, cluster.instances, cluster.router, cluster.load,
            engine=engine, semantics=semantics,
        )  # fmt: skip
    if isinstance(params, Hierarchy):
        return replay_hierarchy(trace, params, block_size, engine=engine, semantics=semantics)
    import prefixsim

    if engine == "kernel" and semantics == _SPEC:
        return prefixsim.replay_params(trace, params, block_size)
    return prefixsim.replay_params(trace, params, block_size, engine=engine, semantics=semantics)
