"""Token and chat traces where no test looked: two prefixes whose 128-bit block hashes agree in
one 64-bit lane only stay two blocks, and a first line that is only a byte-order mark (and
blanks) does not make a token or chat trace look like Mooncake."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixsim import load_trace, replay
from prefixsim.formats import hashing

TOKEN_MAX = 2**63  # token ids are integers in [0, 2**63)
BOM = b"\xef\xbb\xbf"


def write_tokens(path: Path, prompts: list[list[int]]) -> Path:
    rows = [{"timestamp": i, "token_ids": p} for i, p in enumerate(prompts)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_lane_twin(
    parent: tuple[int, int], block: list[int], lane: int, slot_bits: int
) -> list[int]:
    """Tokens of another block after ``parent`` whose hash equals ``block``'s in ``lane`` only.

    Each lane ends ``x = fmix(state ^ last_token)`` (docs/trace-formats.md), so with the state
    after the other tokens known, the last token that gives the same ``x`` is
    ``state_block ^ last ^ state_twin``. The first token is varied until that last token is a
    legal id and, for a lane-1 twin, lane 0 agrees in its low ``slot_bits`` bits (the same slot
    of the interning table, where a lookup comparing lane 1 only would merge them)."""
    want = hashing.block_hash_reference(parent, block[:-1])[lane] ^ block[-1]
    target = hashing.block_hash_reference(parent, block)
    mask = (1 << slot_bits) - 1
    for first in range(1, 1 << 20):
        head = [(block[0] + first) % TOKEN_MAX, *block[1:-1]]
        last = want ^ hashing.block_hash_reference(parent, head)[lane]
        if last >= TOKEN_MAX:
            continue
        twin = [*head, last]
        got = hashing.block_hash_reference(parent, twin)
        if lane == 1 and (got[0] ^ target[0]) & mask:
            continue
        assert got[lane] == target[lane] and got[1 - lane] != target[1 - lane]
        return twin
    raise AssertionError("no twin found")  # pragma: no cover


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    block_size=st.sampled_from([2, 3, 8]),
    shared=st.integers(0, 2),
    lane=st.sampled_from([0, 1]),
    seed_tokens=st.lists(st.integers(0, TOKEN_MAX - 1), min_size=24, max_size=24),
    tail=st.integers(0, 7),
)
def test_hashes_equal_in_one_lane_are_different_blocks(
    tmp_path: Path, block_size: int, shared: int, lane: int, seed_tokens: list[int], tail: int
) -> None:
    # A = shared prefix + block X; B = the same prefix + block Y, Y's hash equal to X's in one
    # lane; C = A again. Expected blocks (dense ids): A [p.., x], B [p.., y], C = A, with
    # y != x; an infinite cache hits B's shared prefix only and all of C's full blocks.
    b = block_size
    prefix = seed_tokens[: shared * b]
    block = seed_tokens[shared * b : (shared + 1) * b]
    parent = (0, 0)
    for j in range(shared):
        parent = hashing.block_hash_reference(parent, prefix[j * b : (j + 1) * b])
    n_accesses = 3 * (shared + 1)
    slot_bits = max(4, (2 * n_accesses - 1).bit_length())  # the interning table's size
    twin = one_lane_twin(parent, block, lane, slot_bits)
    partial = seed_tokens[-tail:] if tail and tail < b else []  # a partial last block: unhashed
    a, bb = prefix + block + partial, prefix + twin + partial
    path = write_tokens(tmp_path / "t.jsonl", [a, bb, a])
    trace = load_trace(path, block_size=b, use_cache=False)
    p = list(range(shared))
    assert trace.block_ids.tolist() == [*p, shared, *p, shared + 1, *p, shared]
    assert trace.n_blocks == shared + 2
    hits = replay(trace, "LRU", 100, block_size=b).hit_tokens.tolist()
    assert hits == [0, shared * b, (shared + 1) * b]


# --- a lone byte-order mark on the first line --------------------------------------------------

TOKEN_ROWS = [
    {"timestamp": 0, "token_ids": [1, 2, 3, 4, 5]},
    {"timestamp": 1, "token_ids": [1, 2, 3, 4, 6, 7]},
]
CHAT_ROWS = [
    {"messages": [{"role": "user", "content": "hello there"}]},
    {"messages": [{"role": "user", "content": "hello there, again"}]},
]
MOONCAKE_ROWS = [
    {"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, 2]},
    {"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1, 3]},
]
FIRST_LINES = [BOM + b"\n", BOM + b"\r\n", BOM + b" \t\n", BOM + b"\n\n", BOM + b"\n \r\n"]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("first", FIRST_LINES, ids=lambda b: repr(b[3:].decode()))
@pytest.mark.parametrize(
    ("rows", "block_size"),
    [(TOKEN_ROWS, 2), (CHAT_ROWS, 4), (MOONCAKE_ROWS, None)],
    ids=["tokens", "chat", "mooncake"],
)
def test_lone_bom_first_line_keeps_the_format(
    tmp_path: Path, rows: list[dict[str, object]], block_size: int | None, first: bytes, gz: bool
) -> None:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(body)
    path = tmp_path / ("bom.jsonl.gz" if gz else "bom.jsonl")
    path.write_bytes(gzip.compress(first + body) if gz else first + body)
    want = load_trace(plain, block_size=block_size, use_cache=False)
    got = load_trace(path, block_size=block_size, use_cache=False)
    assert got.block_size == block_size  # a token or chat trace, hashed at block_size
    for name in ("input_lengths", "output_lengths", "offsets", "block_ids", "timestamps"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
    blank = first.count(b"\n")
    assert got.line_numbers.tolist() == [n + blank for n in want.line_numbers.tolist()]
