"""Traces as the engines see them, for the fidelity tests.

An engine hashes token blocks, so a block hash stands for the whole prefix up to its block (two
requests share hash ``h_i`` only if they share the first ``i + 1`` blocks), every request has one
hash per block (``ceil(input_length / block_size)``), and no hash repeats within a request.
:func:`engine_requests` draws multi-turn, branching sessions with those properties (the hash of a
block is the interned tuple of the session's "token blocks" up to it, as Mooncake builds its
``hash_ids``), prompt lengths that may or may not end on a block boundary, and output lengths.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import Trace
from prefixsim.oracles import vllm_v1
from prefixsim.policies import PolicyParams
from prefixsim.semantics import Semantics
from strategies import conversations, policy_params

ENGINE_BLOCK_SIZES = (1, 2, 3, 16)


@dataclass(frozen=True)
class EngineCase:
    block_size: int
    requests: list[tuple[int, list[int]]]
    """``(input_length, hash_ids)``."""
    outputs: list[int]

    @property
    def max_blocks(self) -> int:
        return max((len(h) for _, h in self.requests), default=0)

    def max_kv_blocks(self) -> int:
        """Blocks a request holds at once when its output is decoded too."""
        b = self.block_size
        return max(
            (
                -(-(n + max(o, 1) - 1) // b)
                for (n, _), o in zip(self.requests, self.outputs, strict=True)
            ),
            default=0,
        )

    def max_prompt_blocks(self) -> int:
        """Blocks a request's prompt holds at once (``ceil(input_length / block_size)``)."""
        return max((-(-n // self.block_size) for n, _ in self.requests), default=0)

    def trace(self) -> Trace:
        return engine_trace(self.requests, self.outputs)


@st.composite
def engine_requests(
    draw: st.DrawFn,
    max_requests: int = 30,
    block_sizes: Sequence[int] = ENGINE_BLOCK_SIZES,
    aligned: bool | None = None,
) -> EngineCase:
    """Sessions that extend, branch, repeat and restart earlier prompts. ``aligned``: True
    makes every prompt end on a block boundary, False never (block sizes >= 2), None either."""
    bs = draw(st.sampled_from([b for b in block_sizes if aligned is not False or b >= 2]))
    chunk = st.integers(0, 5)  # few distinct "token blocks": sessions collide and share
    prompts: list[tuple[int, ...]] = [()]
    interned: dict[tuple[int, ...], int] = {}
    requests = []
    outputs = []
    for _ in range(draw(st.integers(1, max_requests))):
        base = draw(st.sampled_from(prompts))
        kind = draw(st.sampled_from(["extend", "branch", "repeat", "new"]))
        if kind == "extend":
            blocks = base + tuple(draw(st.lists(chunk, min_size=1, max_size=4)))
        elif kind == "branch":
            cut = draw(st.integers(0, len(base)))
            blocks = base[:cut] + tuple(draw(st.lists(chunk, min_size=1, max_size=3)))
        elif kind == "repeat":
            blocks = base
        else:
            blocks = tuple(draw(st.lists(chunk, max_size=6)))
        prompts.append(blocks)
        hash_ids = [interned.setdefault(blocks[: i + 1], len(interned)) for i in range(len(blocks))]
        n = len(hash_ids)
        if n == 0:
            length = 0
        elif aligned is True:
            length = n * bs
        elif aligned is False:
            length = draw(st.integers((n - 1) * bs + 1, n * bs - 1))
        else:
            length = draw(st.integers((n - 1) * bs + 1, n * bs))
        requests.append((length, hash_ids))
        outputs.append(draw(st.integers(0, 3 * bs + 1)))
    return EngineCase(bs, requests, outputs)


def engine_trace(
    requests: Sequence[tuple[int, Sequence[Hashable]]],
    outputs: Sequence[int] | None = None,
    name: str = "engine",
) -> Trace:
    """A :class:`Trace` of ``(input_length, hash_ids)`` pairs with ``outputs`` as the output
    lengths (0 if None)."""
    return make_trace(requests, name, outputs)


@st.composite
def vllm_point(draw: st.DrawFn) -> tuple[EngineCase, int, Semantics]:
    """An engine trace, a capacity that holds its largest request and the null block, and a
    vLLM semantics (either free order, outputs cached or not)."""
    case = draw(engine_requests())
    outputs = draw(st.booleans())
    need = case.max_kv_blocks() if outputs else case.max_blocks
    capacity = draw(st.integers(max(need, 1) + 1, need + 11))  # + the null block
    free = draw(st.sampled_from(["front", "back"]))
    return case, capacity, Semantics("vllm", unhashed_free=free, cache_output_blocks=outputs)


@st.composite
def sglang_point(draw: st.DrawFn) -> tuple[EngineCase, int, bool, bool]:
    """An engine trace, a capacity that holds its largest request, whether outputs are
    cached, and RADIX's ``evict_shortfall``."""
    case = draw(engine_requests())
    outputs = draw(st.booleans())
    need = case.max_kv_blocks() if outputs else case.max_blocks
    capacity = draw(st.integers(max(need, 1), need + 10))
    return case, capacity, outputs, draw(st.booleans())


ENGINE_MODES = tuple(
    Semantics(name, unhashed_free=free, cache_output_blocks=out)
    for name, free in (("vllm", "front"), ("vllm", "back"), ("sglang", "front"))
    for out in (False, True)
)
"""Every engine mode and option: vLLM front and back, SGLang, outputs cached or not."""


@st.composite
def mode_point(
    draw: st.DrawFn, policies: Sequence[str]
) -> tuple[Trace, int, PolicyParams, Semantics]:
    """``(trace, block_size, params, semantics)``: an engine-shaped trace
    (:func:`engine_requests`) or one of tests/strategies.py's conversations (duplicate hashes,
    ``hash_ids`` longer or shorter than the prompt), with output lengths; a policy of
    ``policies`` whose capacity holds the largest request (and vLLM's null block); an engine
    mode of :data:`ENGINE_MODES`."""
    sem = draw(st.sampled_from(ENGINE_MODES))
    if draw(st.booleans()):
        case = draw(engine_requests(max_requests=25))
        bs, requests, outputs = case.block_size, case.requests, case.outputs
    else:
        bs = draw(st.sampled_from([1, 2, 3, 16]))
        requests = draw(conversations(max_requests=25, block_sizes=(bs,)))
        n = len(requests)
        outputs = draw(st.lists(st.integers(0, 3 * bs + 1), min_size=n, max_size=n))
    case = EngineCase(bs, [(length, list(ids)) for length, ids in requests], outputs)
    need = max(case.max_kv_blocks() if sem.cache_output_blocks else 0, case.max_prompt_blocks())
    capacity = max(need, 1) + (sem.name == "vllm") + draw(st.integers(0, 12))
    params = draw(policy_params(draw(st.sampled_from(policies)), capacity))
    return case.trace(), bs, params, sem


def vllm_oracle(case: EngineCase, capacity: int, sem: Semantics) -> vllm_v1.OracleResult:
    """The vLLM oracle's replay of a :func:`vllm_point` draw (its free order, its outputs)."""
    return vllm_v1.replay(
        case.requests,
        capacity,
        case.block_size,
        unhashed_free=sem.unhashed_free,
        output_lengths=case.outputs if sem.cache_output_blocks else None,
    )
