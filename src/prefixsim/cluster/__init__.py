"""Many instances: a cluster of prefix caches behind a router, with the load each carries.

The semantics are in ``docs/cluster.md``. Public names (stable): :func:`replay_cluster`,
:func:`replay_cluster_params`, :func:`check_cluster`, :class:`ClusterResult`, :class:`LoadModel`,
:class:`RouterParams`, :func:`make_router`, :func:`router_names`, :func:`get_router`.
"""

from .load import LoadModel
from .replay import ClusterResult, check_cluster, replay_cluster, replay_cluster_params
from .routers import RouterParams, get_router, make_router, router_names

__all__ = [
    "ClusterResult",
    "LoadModel",
    "RouterParams",
    "check_cluster",
    "get_router",
    "make_router",
    "replay_cluster",
    "replay_cluster_params",
    "router_names",
]
