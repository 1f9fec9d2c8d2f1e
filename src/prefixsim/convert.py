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
from collections.abc import Callable, Iterator

from ._args import OneLineParser
from ._output import atomic_output, check_output_path
from .errors import ParameterError, PrefixSimError, error_line
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
    """Write ``trace`` as a Mooncake JSONL file (gzip if ``out`` ends in ``.gz``), atomically
    (:func:`prefixsim._output.atomic_output`: a regular file or a new path only)."""
    with atomic_output(out) as raw:
        if os.fspath(out).endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as f:
                for line in mooncake_lines(trace):
                    f.write(line.encode())
        else:
            for line in mooncake_lines(trace):
                raw.write(line.encode())


def check_blocks_written(trace: Trace, block_size: int | None) -> None:
    """Refuse a block size longer than every prompt of a trace hashed from tokens: every
    ``hash_ids`` written would be empty, a trace no replay can hit (prompts that are all empty
    have no block at any size, and are written as they are)."""
    if trace.block_size is None or trace.n_accesses or not trace.n_requests:
        return
    longest = int(trace.input_lengths.max())
    if longest == 0:
        return
    raise ParameterError(
        "block_size",
        block_size,
        f"longer than every prompt (the longest has {longest} tokens): every hash_ids would "
        "be empty",
    )


# The trace tools (``python -m prefixsim.convert`` and ``python -m prefixsim.synth``) share
# their command line's frame: the program name, the example, the one error line and exit
# status 2 for bad input, and the summary on stderr (stdout stays free).


def tool_parser(tool: str, description: str, example: str) -> argparse.ArgumentParser:
    prog = f"python -m prefixsim.{tool}"
    return OneLineParser(prog=prog, description=description, epilog=f"example: {prog} {example}")


def run_tool(tool: str, work: Callable[[], str]) -> int:
    """Run ``work`` (it returns its summary line): 0, or 2 with one line naming the error."""
    try:
        summary = work()
    except (PrefixSimError, OSError) as err:
        print(error_line(f"prefixsim.{tool}", err), file=sys.stderr)
        return 2
    print(summary, file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "convert",
        "Convert a token, chat or (unchained) Mooncake trace to a Mooncake trace.",
        "chats.jsonl chats.jsonl.gz --block-size 16",
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
    return run_tool("convert", lambda: _convert(args))


def _convert(args: argparse.Namespace) -> str:
    check_output_path(args.output)  # before the parse: nothing to undo
    trace = load_trace(args.input, block_size=args.block_size, options=options_from_args(args))
    check_blocks_written(trace, args.block_size)
    write_mooncake(trace, args.output)
    return (
        f"{args.output}: {trace.n_requests} requests, {trace.n_accesses} block accesses, "
        f"{trace.n_blocks} distinct blocks"
    )


if __name__ == "__main__":
    sys.exit(main())
