"""The specification's sanity checks, on the bundled trace, for every policy."""

from __future__ import annotations

import gzip
import json

import pytest

from prefixsim import Trace, replay
from prefixsim.trace import bundled_trace_path


@pytest.fixture(scope="module")
def raw_requests() -> list[dict]:  # type: ignore[type-arg]
    with gzip.open(bundled_trace_path("conversation"), "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("policy", ["S3FIFO", "LRU"])
@pytest.mark.parametrize("capacity", [1024, 4096, 65536])
def test_report_sanity(conversation: Trace, raw_requests, policy: str, capacity: int) -> None:  # type: ignore[no-untyped-def]
    report = replay(conversation, policy, capacity).to_report()
    per_request = report["per_request"]
    assert report["overall_hit_rate"] == report["total_hit_tokens"] / report["total_prompt_tokens"]
    assert sum(r["hit_tokens"] for r in per_request) == report["total_hit_tokens"]
    assert sum(r["prompt_tokens"] for r in per_request) == report["total_prompt_tokens"]
    assert report["total_prompt_tokens"] == sum(r["input_length"] for r in raw_requests)
    assert report["final_cache_blocks"] <= report["cache_capacity_blocks"] == capacity
    assert len(per_request) == len(raw_requests) == 12031
    # A request's hit is never more than its prompt, and is a multiple of 512 unless clamped.
    for r, raw in zip(per_request, raw_requests, strict=True):
        assert r["prompt_tokens"] == raw["input_length"]
        assert 0 <= r["hit_tokens"] <= r["prompt_tokens"]
        assert r["hit_tokens"] % 512 == 0 or r["hit_tokens"] == r["prompt_tokens"]
    # The first request's first hash has never been seen: no hit.
    assert per_request[0]["hit_tokens"] == 0


def test_lru_without_evictions_meets_the_ceiling(conversation: Trace, raw_requests) -> None:  # type: ignore[no-untyped-def]
    """LRU as large as the number of distinct blocks never evicts, so each request hits the
    longest prefix of hashes seen before it: computed here with a set, from the raw JSON."""
    seen: set[int] = set()
    expected = []
    for raw in raw_requests:
        k = 0
        while k < len(raw["hash_ids"]) and raw["hash_ids"][k] in seen:
            k += 1
        expected.append(min(k * 512, raw["input_length"]))
        seen.update(raw["hash_ids"])
    result = replay(conversation, "LRU", len(seen))
    assert result.hit_tokens.tolist() == expected
    assert result.final_cache_blocks == len(seen) == 182_790
    assert result.counters["evictions"] == 0


def test_s3fifo_is_not_lru(conversation: Trace) -> None:
    s3 = replay(conversation, "S3FIFO", 4096)
    lru = replay(conversation, "LRU", 4096)
    assert s3.total_hit_tokens != lru.total_hit_tokens
    # S3FIFO keeps one-hit wonders out of M: on this trace most of S3FIFO's cache turns over
    # through the ghost and its final size stays below capacity, while LRU fills up.
    assert lru.final_cache_blocks == 4096
    assert s3.final_cache_blocks <= 4096
