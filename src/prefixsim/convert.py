"""``python -m prefixsim.convert IN OUT``: any trace format to a Mooncake JSONL trace.

The output is what :func:`prefixsim.load_trace` reads from the input with the same options, in
the Mooncake format every tool of that ecosystem reads: one line per request with
``timestamp``, ``input_length``, ``output_length`` and ``hash_ids``, the blocks' dense ids
(0, 1, ... in order of first appearance, which is how Mooncake's own traces number them). Token
and chat traces are hashed at ``--block-size`` (required for them); ``--chain`` re-hashes an
unchained Mooncake trace. ``OUT`` ending in ``.gz`` is gzip-compressed. Loading ``OUT`` gives the
same replays as loading ``IN`` at that block size. A request with a session gets
``"session_id": <its dense session id>`` (0, 1, ... in order of first appearance, so reading
them back numbers them the same and the ``session`` router routes the same).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import PrefixSimError
from .formats.args import add_trace_arguments, options_from_args
from .trace import Trace, load_trace


def mooncake_lines(trace: Trace, batch: int = 10_000) -> Iterator[str]:
    """The trace as Mooncake JSONL lines (with their newline). Converted to Python values
    ``batch`` requests at a time: a list of all ids would take ~40 bytes per id."""
    for lo in range(0, trace.n_requests, batch):
        hi = min(lo + batch, trace.n_requests)
        ts = trace.timestamps[lo:hi].tolist()
        ins = trace.input_lengths[lo:hi].tolist()
        outs = trace.output_lengths[lo:hi].tolist()
        base = int(trace.offsets[lo])
        offsets = (trace.offsets[lo : hi + 1] - base).tolist()
        ids = trace.block_ids[base : int(trace.offsets[hi])].tolist()
        no_sessions = trace.session_ids is None
        sessions = [-1] * (hi - lo) if no_sessions else trace.session_ids[lo:hi].tolist()  # type: ignore[index]
        for r in range(hi - lo):
            t = ts[r]
            stamp = json.dumps(int(t) if t.is_integer() and abs(t) < 2**53 else t)
            hash_ids = ",".join(map(str, ids[offsets[r] : offsets[r + 1]]))
            session = f', "session_id": {sessions[r]}' if sessions[r] >= 0 else ""
            yield (
                f'{{"timestamp": {stamp}, "input_length": {ins[r]}, '
                f'"output_length": {outs[r]}, "hash_ids": [{hash_ids}]{session}}}\n'
            )


def write_mooncake(trace: Trace, out: str | os.PathLike[str]) -> None:
    """Write ``trace`` as a Mooncake JSONL file (gzip if ``out`` ends in ``.gz``), atomically."""
    path = Path(out)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            if path.name.endswith(".gz"):
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as f:
                    for line in mooncake_lines(trace):
                        f.write(line.encode())
            else:
                for line in mooncake_lines(trace):
                    raw.write(line.encode())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m prefixsim.convert",
        description="Convert a token, chat or (unchained) Mooncake trace to a Mooncake trace.",
        epilog="example: python -m prefixsim.convert chats.jsonl chats.jsonl.gz --block-size 16",
    )
    p.add_argument("input", metavar="IN", help="trace file (.jsonl or .jsonl.gz)")
    p.add_argument("output", metavar="OUT", help="Mooncake trace to write (.jsonl or .jsonl.gz)")
    p.add_argument(
        "--block-size", type=int, default=None, help="tokens per block (token and chat traces)"
    )
    add_trace_arguments(p, format_flag="--from")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        trace = load_trace(args.input, block_size=args.block_size, options=options_from_args(args))
        if not Path(args.output).parent.is_dir():
            print(f"prefixsim.convert: error: {args.output}: no such directory", file=sys.stderr)
            return 2
        write_mooncake(trace, args.output)
    except (PrefixSimError, OSError) as err:
        print(f"prefixsim.convert: error: {err}", file=sys.stderr)
        return 2
    print(
        f"{args.output}: {trace.n_requests} requests, {trace.n_accesses} block accesses, "
        f"{trace.n_blocks} distinct blocks",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
