"""Engine-faithful references: what vLLM and SGLang would report, request by request.

Each module re-implements, in plain Python and from the engine's source (cited file by file,
function by function, with the commit read), the part of one engine that decides prefix hits:
the data structures and the calls the scheduler makes for one request admitted at its arrival
and finished before the next one arrives (a sequential replay). They are test oracles for the
semantics of :mod:`prefixsim.semantics`, shipped so that a user can check the fidelity claim on
a trace of their own:

* :mod:`prefixsim.oracles.vllm_v1`: vLLM v1's KV cache manager for one full-attention group;
* :mod:`prefixsim.oracles.sglang_radix`: SGLang's ``RadixCache`` with ``page_size =
  block_size``.

They are slow (a Python object per block) and follow the engines' code paths, not this
project's policy interface; :mod:`prefixsim.semantics` and the policies are the simulator.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

Request = tuple[int, Sequence[Hashable]]
"""``(input_length, hash_ids)``."""


@dataclass(frozen=True)
class OracleResult:
    """What an engine reports for a sequential replay."""

    hit_tokens: list[int]
    """Per request: the prompt tokens the engine took from its prefix cache."""
    cached_hashes: frozenset[Hashable]
    """Block hashes of the trace held in the cache at the end (the engine's own hashes of
    output blocks are left out)."""
    counters: dict[str, int]
    """Engine events (evictions, duplicate blocks, ...); see each oracle."""


def requests_of(trace: object) -> tuple[list[Request], list[int]]:
    """``(requests, output_lengths)`` of a :class:`~prefixsim.trace.Trace` (hash ids are its
    dense block ids)."""
    from ..trace import Trace

    assert isinstance(trace, Trace)
    ids = trace.block_ids.tolist()
    offsets = trace.offsets.tolist()
    lengths = trace.input_lengths.tolist()
    reqs = [(lengths[r], ids[offsets[r] : offsets[r + 1]]) for r in range(trace.n_requests)]
    return reqs, np.asarray(trace.output_lengths).tolist()


def output_hash(request: int, i: int) -> tuple[str, int, int]:
    """The hash an oracle gives the ``i``-th output block of ``request``: one no trace block has
    (the engines hash generated tokens themselves; a trace names its prompts' blocks only)."""
    return ("output", request, i)


def trace_hashes(cached: Iterable[Hashable]) -> frozenset[Hashable]:
    """The hashes of ``cached`` that are the trace's (:attr:`OracleResult.cached_hashes`), the
    output blocks' (:func:`output_hash`) left out."""
    return frozenset(h for h in cached if not _is_output(h))


def _is_output(h: Hashable) -> bool:
    return isinstance(h, tuple) and len(h) == 3 and h[0] == "output"


def check_consistent(r: int, input_length: int, hash_ids: Sequence[Hashable], bs: int) -> None:
    """An engine hashes every full block of a prompt and allocates its partial one: the trace
    must give one hash per block, ``ceil(input_length / block_size)`` of them."""
    if len(hash_ids) != -(-input_length // bs):
        raise ValueError(
            f"request {r}: {len(hash_ids)} hash_ids for input_length {input_length} at "
            f"block_size {bs} (an engine sees ceil(input_length / block_size) blocks)"
        )
