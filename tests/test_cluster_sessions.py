"""The ``session`` router with the traces' ``session_id`` (docs/cluster.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import TraceError, load_trace, make_params
from prefixsim.cluster import make_router, replay_cluster, replay_cluster_params
from prefixsim.cluster.routers import mix64, ring_points
from strategies import conversations, policy_params


def owner(key: int, instances: int, vnodes: int = 64) -> int:
    """Brute force over the ring: the owner of the first point >= key, wrapping."""
    ring = ring_points(instances, vnodes)
    above = [(p, i) for p, i in ring if p >= key]
    return (min(above) if above else min(ring))[1]


def write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_one_session_with_different_first_blocks_stays_on_one_instance(tmp_path: Path) -> None:
    # Session "chat-A" is dense id 0 (first seen on line 1), 42 is id 1. Request 2 is chat-A
    # again with another first block (hash 9): its key is mix64(0) = 0 (mix64 maps 0 to 0), the
    # same as request 0's, so both go to the owner of the smallest ring point. Request 1's key
    # is mix64(1). Request 3 has no session_id: it is routed by its first block, dense id 3
    # (hashes 5, 7, 9, 11 in order of appearance), key mix64(3).
    head = {"timestamp": 0, "input_length": 512, "output_length": 1}
    rows = [
        {**head, "hash_ids": [5], "session_id": "chat-A"},
        {**head, "hash_ids": [7], "session_id": 42},
        {**head, "input_length": 1024, "hash_ids": [9, 5], "session_id": "chat-A"},
        {**head, "hash_ids": [11], "session_id": None},
    ]
    trace = load_trace(write(tmp_path / "s.jsonl", rows))
    assert trace.session_ids is not None
    assert trace.session_ids.tolist() == [0, 1, 0, -1]
    assert mix64(0) == 0
    smallest_owner = min(ring_points(8, 64))[1]
    expected = [smallest_owner, owner(mix64(1), 8), smallest_owner, owner(mix64(3), 8)]
    for engine in ("reference", "kernel"):
        res = replay_cluster(trace, instances=8, router="session", engine=engine)
        assert res.instance.tolist() == expected
    # Without session ids the first blocks (ids 0 and 2) decide, and these two differ here.
    plain = dataclasses.replace(trace, session_ids=None)
    res = replay_cluster(plain, instances=8, router="session")
    assert res.instance.tolist() == [owner(mix64(b), 8) for b in (0, 1, 2, 3)]
    assert res.instance[0] != res.instance[2]


def test_session_ids_of_token_and_chat_traces_and_the_cache(tmp_path: Path) -> None:
    # "7" and 7 are two sessions; ids are dense in order of first appearance.
    tok = [
        {"timestamp": 0, "token_ids": [1, 2], "session_id": "7"},
        {"timestamp": 1, "token_ids": [3], "session_id": 7},
        {"timestamp": 2, "token_ids": [4]},
        {"timestamp": 3, "token_ids": [5], "session_id": "7"},
    ]
    path = write(tmp_path / "t.jsonl", tok)
    for _ in range(2):  # parsed, then read back from the cache
        assert load_trace(path, block_size=1).session_ids.tolist() == [0, 1, -1, 0]  # type: ignore[union-attr]
    chat = [{"messages": [{"role": "user", "content": "hi"}], "session_id": s} for s in "bab"]
    got = load_trace(write(tmp_path / "c.jsonl", chat), block_size=4).session_ids
    assert got is not None and got.tolist() == [0, 1, 0]
    plain = [{"timestamp": 0, "token_ids": [1, 2]}]
    assert load_trace(write(tmp_path / "p.jsonl", plain), block_size=1).session_ids is None
    assert load_trace("conversation").session_ids is None


@pytest.mark.parametrize("bad", [1.5, True, [1], {"a": 1}])
def test_a_bad_session_id_is_refused(tmp_path: Path, bad: object) -> None:
    row = {"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}
    path = write(tmp_path / "b.jsonl", [row, {**row, "session_id": bad}])
    with pytest.raises(TraceError, match=r"b.jsonl:2: session_id: expected a string or an integer"):
        load_trace(path)


@settings(max_examples=60, deadline=None)
@given(
    requests=conversations(max_requests=30),
    params=policy_params(),
    instances=st.integers(1, 6),
    data=st.data(),
)
def test_kernel_matches_reference_with_sessions(requests, params, instances, data) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    n = trace.n_requests
    sessions = data.draw(st.lists(st.integers(-1, 5), min_size=n, max_size=n))
    trace = dataclasses.replace(trace, session_ids=np.array(sessions, np.int64))
    rp = make_router("session", vnodes=data.draw(st.integers(1, 8)), key_blocks=2)
    fast = replay_cluster_params(trace, params, 16, instances, rp, None, engine="kernel")
    ref = replay_cluster_params(trace, params, 16, instances, rp, None, engine="reference")
    np.testing.assert_array_equal(fast.instance, ref.instance)
    np.testing.assert_array_equal(fast.hit_tokens, ref.hit_tokens)
    for r in range(n):  # one session, one instance
        if sessions[r] >= 0:
            assert fast.instance[r] == owner(mix64(sessions[r]), instances, rp.vnodes)  # type: ignore[attr-defined]


def test_session_ids_do_not_change_other_routers() -> None:
    trace = make_trace([(2, [r % 3, r]) for r in range(20)])
    with_ids = dataclasses.replace(trace, session_ids=np.arange(20, dtype=np.int64) % 4)
    params = make_params("LRU", 8)
    for name in ("round_robin", "random"):
        a = replay_cluster_params(trace, params, 16, 3, make_router(name), None)
        b = replay_cluster_params(with_ids, params, 16, 3, make_router(name), None)
        np.testing.assert_array_equal(a.instance, b.instance)


def test_convert_keeps_the_sessions(tmp_path: Path) -> None:
    from prefixsim.convert import write_mooncake

    rows = [{"timestamp": t, "token_ids": [t, 1], "session_id": s} for t, s in enumerate("xyx")]
    tokens = load_trace(
        write(tmp_path / "t.jsonl", [*rows, {"timestamp": 3, "token_ids": [2]}]), block_size=1
    )
    write_mooncake(tokens, tmp_path / "m.jsonl")
    back = load_trace(tmp_path / "m.jsonl")
    assert back.session_ids is not None and back.session_ids.tolist() == [0, 1, 0, -1]
    a = replay_cluster(tokens, instances=5, router="session", block_size=1)
    b = replay_cluster(back, instances=5, router="session", block_size=1)
    np.testing.assert_array_equal(a.instance, b.instance)
