"""``python -m prefixsim TRACE``: replay one trace through one policy and print the report."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import PrefixSimError
from .policies import policy_names
from .policies.s3fifo import S3FIFOParams
from .replay import ENGINES, replay
from .trace import BUNDLED_TRACES, load_trace, oddities

_S3 = S3FIFOParams(capacity=4096)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m prefixsim",
        description=(
            "Replay a Mooncake JSONL trace through a block-level prefix cache and print the "
            "longest-prefix hit report as JSON (overall_hit_rate, total_hit_tokens, "
            "total_prompt_tokens, per_request, final_cache_blocks, cache_capacity_blocks, the "
            "parameters used and block-level counters)."
        ),
        epilog="example: python -m prefixsim conversation --policy S3FIFO --capacity 4096",
    )
    p.add_argument(
        "trace",
        metavar="TRACE",
        help=f"trace file (.jsonl or .jsonl.gz) or bundled name ({', '.join(BUNDLED_TRACES)})",
    )
    p.add_argument(
        "--policy",
        default="S3FIFO",
        help=f"one of {', '.join(policy_names())} (default: %(default)s)",
    )
    p.add_argument(
        "--capacity", type=int, default=4096, help="cache size in blocks (default: %(default)s)"
    )
    p.add_argument(
        "--block-size", type=int, default=512, help="tokens per block (default: %(default)s)"
    )
    s3 = p.add_argument_group("S3FIFO parameters (ignored by other policies)")
    s3.add_argument(
        "--small-ratio",
        type=float,
        default=_S3.small_ratio,
        help="fraction of capacity for the small queue, round()ed (default: %(default)s)",
    )
    s3.add_argument(
        "--max-freq",
        type=int,
        default=_S3.max_freq,
        help="saturation value of the frequency counter (default: %(default)s)",
    )
    s3.add_argument(
        "--ghost-freq",
        type=int,
        default=_S3.ghost_freq,
        help="freq a block re-admitted from the ghost starts with in M (default: %(default)s)",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="kernel",
        help="compiled kernel or plain-Python reference (default: %(default)s)",
    )
    p.add_argument(
        "--no-per-request",
        dest="per_request",
        action="store_false",
        help="leave the per_request list out of the report",
    )
    p.add_argument(
        "--oddities",
        action="store_true",
        help="add counts of legal trace oddities (duplicate hashes in a request, "
        "hash_ids longer/shorter than ceil(input_length/block_size), ...) to the report",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout"
    )
    return p  # fmt: skip


def _write_atomic(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file renamed into place, with the mode a plain
    ``open(path, "w")`` would give (``mkstemp`` creates 0600)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        trace = load_trace(args.trace)
        result = replay(
            trace,
            policy=args.policy,
            capacity=args.capacity,
            block_size=args.block_size,
            small_ratio=args.small_ratio,
            max_freq=args.max_freq,
            ghost_freq=args.ghost_freq,
            engine=args.engine,
        )
        report: dict[str, Any] = result.to_report(per_request=args.per_request)
        if args.oddities:
            report["oddities"] = oddities(trace, result.block_size)
        text = json.dumps(report, indent=None if args.per_request else 2) + "\n"
        if args.output:
            _write_atomic(Path(args.output), text)
        else:
            sys.stdout.write(text)
    except PrefixSimError as err:
        print(f"prefixsim: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"prefixsim: error: {err}", file=sys.stderr)
        return 2
    return 0
