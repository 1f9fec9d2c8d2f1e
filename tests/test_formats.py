"""Token traces, chained block hashing, ``chain`` for unchained ids and format detection."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prefixsim
from prefixsim import ParameterError, TraceError, load_trace, replay
from prefixsim.formats import TraceOptions, hashing
from prefixsim.formats.tokens import _parse_fast, _parse_slow


def write_jsonl(path: Path, rows: list[dict[str, object]], gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


# -- hand-worked examples ------------------------------------------------------------------------


def test_shared_prefix_shares_leading_hashes_and_partial_block_is_not_hashed(
    tmp_path: Path,
) -> None:
    # block_size 4. A = 1..9: 9 tokens, two full blocks [1,2,3,4] [5,6,7,8] and a partial [9]
    # that is not hashed. B = 1..8, 10, 11: the same two full blocks and a partial [10, 11].
    # C = 1..4, 9, 9, 9, 9: shares only the first block. So the block ids (dense, by first
    # appearance) are A: 0 1, B: 0 1, C: 0 2.
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 0, "token_ids": list(range(1, 10))},
            {"timestamp": 1, "token_ids": [*range(1, 9), 10, 11], "output_length": 7},
            {"timestamp": 2, "token_ids": [1, 2, 3, 4, 9, 9, 9, 9], "session_id": "s"},
        ],
    )
    trace = load_trace(path, block_size=4)
    assert trace.offsets.tolist() == [0, 2, 4, 6]
    assert trace.block_ids.tolist() == [0, 1, 0, 1, 0, 2]
    assert trace.n_blocks == 3
    assert trace.input_lengths.tolist() == [9, 10, 8]  # number of tokens
    assert trace.output_lengths.tolist() == [0, 7, 0]
    assert trace.block_size == 4
    # An infinite (LRU 100-block) cache: A misses (0); B finds both blocks: min(2*4, 10) = 8,
    # its partial last block [10, 11] is never a hit; C finds block 0 only: min(1*4, 8) = 4.
    assert replay(trace, "LRU", 100, block_size=4).hit_tokens.tolist() == [0, 8, 4]


def test_block_size_is_an_input_of_the_parse(tmp_path: Path) -> None:
    # Tokens 1..8 twice. block_size 8: one block each, id 0 twice. block_size 3: two full
    # blocks each ([1,2,3], [4,5,6]; [7,8] is partial), ids 0 1 0 1.
    rows = [{"timestamp": i, "token_ids": list(range(1, 9))} for i in range(2)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    t8, t3 = load_trace(path, block_size=8), load_trace(path, block_size=3)
    assert t8.block_ids.tolist() == [0, 0]
    assert t3.block_ids.tolist() == [0, 1, 0, 1]
    assert t8.sha256 != t3.sha256
    with pytest.raises(ParameterError, match="hashed into blocks of 8 tokens"):
        replay(t8, "LRU", 10, block_size=3)
    with pytest.raises(ParameterError, match="block_size"):
        load_trace(path)  # no block size for a token trace


def test_unchained_ids_overstate_hits_and_chain_does_not(tmp_path: Path) -> None:
    # Content-only ids (block_size 16): request 1 is blocks [10, 20], request 2 is [20] alone.
    # Read as chained ids (Mooncake's meaning), request 2's first block 20 is resident after
    # request 1, so it hits min(1 * 16, 16) = 16 tokens. But block 20 followed block 10 in
    # request 1: its KV depends on that prefix, so a real prefix cache cannot serve it.
    # chain=True hashes (root, 10), (h(10), 20) and (root, 20): request 2's block differs from
    # request 1's second block, so it hits 0. Request 1 hits 0 either way.
    rows = [
        {"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [10, 20]},
        {"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [20]},
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    plain = replay(load_trace(path), "LRU", 100, block_size=16)
    chained = replay(load_trace(path, chain=True), "LRU", 100, block_size=16)
    assert plain.hit_tokens.tolist() == [0, 16]
    assert chained.hit_tokens.tolist() == [0, 0]


def test_chain_keeps_an_already_chained_trace() -> None:
    # Mooncake's conversation trace is chained: re-chaining is a bijection on its blocks, so
    # every replay is the same.
    plain, chained = load_trace("conversation"), load_trace("conversation", chain=True)
    assert chained.n_blocks == plain.n_blocks
    assert np.array_equal(chained.block_ids, plain.block_ids)


def test_reference_hash_of_one_block_is_pinned() -> None:
    # The documented definition, written out once more independently: splitmix64's and
    # MurmurHash3's finalisers over (parent ^ seed), then over each token.
    m = (1 << 64) - 1

    def sm(x: int) -> int:
        x ^= x >> 30
        x = x * 0xBF58476D1CE4E5B9 & m
        x ^= x >> 27
        x = x * 0x94D049BB133111EB & m
        return x ^ (x >> 31)

    def mm(x: int) -> int:
        x ^= x >> 33
        x = x * 0xFF51AFD7ED558CCD & m
        x ^= x >> 33
        x = x * 0xC4CEB9FE1A85EC53 & m
        return x ^ (x >> 33)

    a, b = sm(0x9E3779B97F4A7C15), mm(0xC2B2AE3D27D4EB4F)
    for t in (7, 8):
        a, b = sm(a ^ t), mm(b ^ t)
    assert hashing.chain_hashes_reference([7, 8, 9], 2) == [(a, b)]
    h0, h1, offsets = hashing.chain_hashes(np.array([7, 8, 9]), np.array([0, 3]), 2)
    assert (int(h0[0]), int(h1[0])) == (a, b) and offsets.tolist() == [0, 1]


def test_detected_collision_is_refused() -> None:
    # Forge a collision: the same 128-bit hash as block 1 of request 0 and as block 0 of
    # request 1 (different parents: block 0 vs the root).
    h0 = np.array([1, 2, 2], dtype=np.uint64)
    h1 = np.array([5, 6, 6], dtype=np.uint64)
    with pytest.raises(TraceError, match="collision detected at block 0 of request 1"):
        hashing.intern_blocks(h0, h1, np.array([0, 2, 3]), "x")


# -- format detection and errors -------------------------------------------------------------------


def test_unknown_shape_names_the_line_and_the_expected_fields(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('\n\n{"prompt": "hi", "ts": 1}\n')
    with pytest.raises(TraceError) as err:
        load_trace(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:3: unknown trace format")
    for field in ("hash_ids", "token_ids", "messages", "got an object with keys prompt, ts"):
        assert field in msg


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ('{"timestamp": 1, "token_ids": [1, -2]}', "token_ids: expected a list of integers"),
        ('{"timestamp": 1, "token_ids": [1, 2.0]}', "token_ids: expected a list of integers"),
        ('{"token_ids": [1]}', "timestamp: missing"),
        ('{"timestamp": "x", "token_ids": [1]}', "timestamp: expected a finite number"),
        ('{"timestamp": 1, "token_ids": [1], "output_length": -1}', "output_length: expected"),
        ('{"timestamp": 1, "token_ids": 5}', "token_ids: expected a list of integers"),
    ],
)
def test_token_errors_name_line_and_field(tmp_path: Path, line: str, where: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "token_ids": [1, 2]}\n' + line + "\n")
    with pytest.raises(TraceError, match=rf"t\.jsonl:2: {where}"):
        load_trace(path, block_size=2)


def test_forced_format_mismatch_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [{"timestamp": 0, "token_ids": [1]}])
    with pytest.raises(TraceError, match=r"t\.jsonl:1: input_length: missing"):
        load_trace(path, format="mooncake")


def test_gzip_token_trace_and_cache(tmp_path: Path) -> None:
    rows = [{"timestamp": i, "token_ids": list(range(i, i + 20))} for i in range(5)]
    path = write_jsonl(tmp_path / "t.jsonl.gz", rows, gz=True)
    first = load_trace(path, block_size=4)
    again = load_trace(path, block_size=4)  # from the cache
    fresh = load_trace(path, block_size=4, use_cache=False)
    for t in (again, fresh):
        assert t.sha256 == first.sha256 and t.block_size == 4
        assert np.array_equal(t.block_ids, first.block_ids)


# -- Hypothesis: kernel == reference ---------------------------------------------------------

token_lists = st.lists(
    st.lists(st.integers(0, 5), max_size=30) | st.lists(st.integers(0, 2**63 - 1), max_size=12),
    min_size=1,
    max_size=12,
)


def _prefix_sharing(requests: list[list[int]]) -> list[list[int]]:
    """Make later requests extend earlier ones, so prefixes are shared."""
    out = []
    for i, r in enumerate(requests):
        out.append((out[i // 2][: len(r)] if i and i % 3 else []) + r)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=token_lists, block_size=st.integers(1, 9))
def test_kernel_hashing_equals_reference(requests: list[list[int]], block_size: int) -> None:
    requests = _prefix_sharing(requests)
    flat = np.array([t for r in requests for t in r], dtype=np.int64)
    offsets = np.cumsum([0] + [len(r) for r in requests])
    h0, h1, block_offsets = hashing.chain_hashes(flat, offsets, block_size)
    dense: dict[tuple[int, int], int] = {}
    expected_ids: list[int] = []
    expected_offsets = [0]
    for r in requests:
        for h in hashing.chain_hashes_reference(r, block_size):
            expected_ids.append(dense.setdefault(h, len(dense)))
        expected_offsets.append(len(expected_ids))
    assert block_offsets.tolist() == expected_offsets
    ids, n_blocks = hashing.intern_blocks(h0, h1, block_offsets, "x")
    assert ids.tolist() == expected_ids and n_blocks == len(dense)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=token_lists,
    outputs=st.lists(st.none() | st.integers(0, 1000), min_size=12, max_size=12),
)
def test_fast_parser_equals_exact_parser(
    requests: list[list[int]], outputs: list[int | None]
) -> None:
    rows = []
    for i, r in enumerate(requests):
        row: dict[str, object] = {"timestamp": i * 1.5, "token_ids": r}
        if outputs[i] is not None:
            row["output_length"] = outputs[i]
        rows.append(row)
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    fast, slow = _parse_fast(body), _parse_slow(body, "x")
    assert fast is not None
    for name in ("timestamps", "output_lengths", "token_offsets", "tokens", "line_numbers"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name


def test_package_exports_the_formats() -> None:
    assert prefixsim.formats.FORMATS == ("mooncake", "tokens", "chat")


# -- chat traces -----------------------------------------------------------------------------------


def test_chat_bytes_plain_template_hand_worked(tmp_path: Path) -> None:
    # plain template, built-in byte tokenizer, block_size 4, no timestamps at 2 requests/s.
    # Turn 1 renders "user: hi\n" + "assistant: " = 9 + 11 = 20 bytes: 5 full blocks.
    # Turn 2 renders "user: hi\n" "assistant: yo\n" "user: ok\n" "assistant: "
    # = 9 + 14 + 9 + 11 = 43 bytes: 10 full blocks (3 bytes partial); its first 20 bytes are
    # turn 1's prompt, so its first 5 blocks are turn 1's. Infinite cache: turn 2 hits
    # min(5 * 4, 43) = 20 tokens. Arrivals: 0 and 1000 / 2 = 500 ms.
    hi = {"role": "user", "content": "hi"}
    rows = [
        {"messages": [hi], "model": "ignored"},
        {
            "messages": [
                hi,
                {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "ok"},
            ],
            "output_length": 3,
        },
    ]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    opts = TraceOptions(chat_template="plain", arrival_rate=2.0)
    trace = load_trace(path, block_size=4, options=opts)
    assert trace.input_lengths.tolist() == [20, 43]
    assert trace.offsets.tolist() == [0, 5, 15]
    assert trace.block_ids[5:10].tolist() == list(range(5))
    assert trace.timestamps.tolist() == [0.0, 500.0]
    assert trace.output_lengths.tolist() == [0, 3]
    assert replay(trace, "LRU", 100, block_size=4).hit_tokens.tolist() == [0, 20]
    # chatml renders a different text, so a different trace identity and other blocks.
    chatml = load_trace(path, block_size=4)
    assert chatml.input_lengths[0] == len("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert chatml.sha256 != trace.sha256


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        (['{"messages": [{"role": "user"}]}'], r":1: messages: expected .* element 0 has content"),
        (['{"messages": "hi"}'], r":1: messages: expected a list"),
        (['{"messages": [], "timestamp": 1}', '{"messages": []}'], r":2: timestamp: missing here"),
    ],
)
def test_chat_errors_name_line_and_field(tmp_path: Path, lines: list[str], where: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=where):
        load_trace(path, block_size=4)


def test_chat_bad_template_and_missing_tokenizer_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": []}])
    with pytest.raises(ParameterError, match="chat_template"):
        load_trace(path, block_size=4, options=TraceOptions(chat_template="{nope}"))
    with pytest.raises(ParameterError, match="tokenizer"):
        load_trace(path, block_size=4, options=TraceOptions(tokenizer=str(tmp_path / "no.json")))


def test_chat_with_a_trained_tokenizer(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["[UNK]"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    sentences = ["the cache keeps the prefix", "a block of tokens", "hello there, assistant"] * 5
    tok.train_from_iterator(sentences, trainer=trainer)
    tok_path = tmp_path / "tokenizer.json"
    tok.save(str(tok_path))
    rows = [{"timestamp": 3, "messages": [{"role": "user", "content": s}]} for s in sentences[:3]]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    trace = load_trace(path, block_size=2, options=TraceOptions(tokenizer=str(tok_path)))
    from prefixsim.formats.chat import render

    # Expected: encode each rendered prompt directly, then the reference hashing.
    dense: dict[tuple[int, int], int] = {}
    expected = []
    for r in rows:
        ids = tok.encode(render(r["messages"]), add_special_tokens=False).ids  # type: ignore[arg-type]
        expected.append(len(ids))
        for h in hashing.chain_hashes_reference(ids, 2):
            dense.setdefault(h, len(dense))
    assert trace.input_lengths.tolist() == expected
    assert trace.n_blocks == len(dense)
