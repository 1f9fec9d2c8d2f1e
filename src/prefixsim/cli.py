"""``python -m prefixsim TRACE``: replay one trace through one policy and print the report."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._args import OneLineParser
from ._output import check_output_path, write_text
from .cost_bounds import capacity_from_size, check_cost
from .cost_table import cost_report
from .errors import ParameterError, PrefixSimError, error_line
from .first_use import noting
from .formats.args import add_trace_arguments, options_from_args
from .hardware import TIERS, hardware_names, load_hardware
from .models import DTYPE_BYTES, load_model, model_names
from .policies import policy_names
from .policies.s3fifo import S3FIFOParams
from .replay import ENGINES, replay
from .semantics import FREE_ORDERS, SEMANTICS, Semantics
from .trace import BUNDLED_TRACES, load_trace, oddities

_S3 = S3FIFOParams(capacity=4096)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m prefixsim",
        description=(
            "Replay a JSONL trace (Mooncake hash_ids, token ids or chat messages) through a "
            "block-level prefix cache and print the longest-prefix hit report as JSON "
            "(overall_hit_rate, total_hit_tokens, total_prompt_tokens, per_request, "
            "final_cache_blocks, cache_capacity_blocks, the parameters used and block-level "
            "counters)."
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
        "--capacity",
        type=int,
        default=None,
        help="cache size in blocks (default: 4096, or from --cache-size)",
    )
    p.add_argument(
        "--block-size", type=int, default=512, help="tokens per block (default: %(default)s)"
    )
    add_trace_arguments(p)
    _add_semantics_arguments(p)
    _add_s3fifo_arguments(p)
    _add_cost_arguments(p)
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


def _add_semantics_arguments(p: argparse.ArgumentParser) -> None:
    """The hit rule (docs/semantics.md): the specification's, or an engine's."""
    sem = p.add_argument_group("semantics (docs/semantics.md)")
    sem.add_argument(
        "--semantics",
        choices=SEMANTICS,
        default="spec",
        help="hit rule: the specification's, vLLM v1's or SGLang's (default: %(default)s)",
    )
    sem.add_argument(
        "--unhashed-free",
        choices=FREE_ORDERS,
        default="front",
        help="vllm only: where a freed partial block goes in the free queue (default: "
        "%(default)s, today's releases; back: before vLLM PR #42656)",
    )
    sem.add_argument(
        "--cache-output-blocks",
        action="store_true",
        help="vllm and sglang only: also cache the full blocks the generated tokens fill",
    )


def _add_s3fifo_arguments(p: argparse.ArgumentParser) -> None:
    """S3FIFO's parameters, with the defaults of the policy's own dataclass."""
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


def _add_cost_arguments(p: argparse.ArgumentParser) -> None:
    """Model, size in bytes and hardware: what turns blocks into GiB and seconds."""
    cost = p.add_argument_group(
        "model and cost (docs/cost-model.md; est_ values are a model, not measurements)"
    )
    cost.add_argument(
        "--model",
        metavar="NAME|FILE",
        help=f"model profile ({', '.join(model_names())}) or a YAML file: adds bytes and "
        "prefill FLOPs to the report",
    )
    cost.add_argument(
        "--kv-dtype", choices=list(DTYPE_BYTES), help="KV-cache dtype (default: the model's)"
    )
    cost.add_argument(
        "--cache-size",
        metavar="SIZE",
        help="cache size in bytes instead of --capacity (64GiB, 1TiB, 500GB): "
        "whole blocks of --model, floor",
    )
    cost.add_argument(
        "--hardware",
        metavar="NAME|FILE",
        help=f"hardware profile ({', '.join(hardware_names())}) or a YAML file: adds the "
        "estimated prefill time (needs --model)",
    )
    cost.add_argument(
        "--cache-tier",
        choices=TIERS,
        default="hbm",
        help="where the cached blocks are kept, for the transfer time (default: %(default)s)",
    )


def _semantics(args: argparse.Namespace) -> Semantics:
    """The options' :class:`Semantics`; a combination it refuses names the option."""
    try:
        return Semantics(args.semantics, args.unhashed_free, args.cache_output_blocks)
    except ParameterError as err:
        option = "--" + err.name.replace("_", "-")
        raise ParameterError(option, err.value, err.allowed) from None


def _sizing(args: argparse.Namespace) -> tuple[int, int | None, Any, Any]:
    """``(capacity, cache_bytes, model, hardware)`` from the options (checked together)."""
    model = None if args.model is None else load_model(args.model, args.kv_dtype, "--model")
    hardware = None if args.hardware is None else load_hardware(args.hardware, "--hardware")
    if model is None:
        for option, value in (
            ("--cache-size", args.cache_size),
            ("--hardware", args.hardware),
            ("--kv-dtype", args.kv_dtype),
        ):
            if value is not None:
                raise ParameterError(option, value, "needs --model")
    if args.cache_size is None:
        return (4096 if args.capacity is None else args.capacity), None, model, hardware
    if args.capacity is not None:
        raise ParameterError(
            "--cache-size", args.cache_size, "give --capacity (blocks) or --cache-size, not both"
        )
    assert model is not None
    capacity, cache_bytes = capacity_from_size(
        args.cache_size, model, args.block_size, "--cache-size"
    )
    return capacity, cache_bytes, model, hardware


def _add_cost(
    report: dict[str, Any],
    result: Any,
    model: Any,
    hardware: Any,
    tier: str,
    cache_bytes: int | None,
) -> None:
    """The model's bytes and the prefill work (and estimated time) in the report."""
    extra, cost = cost_report(
        model,
        result.prompt_tokens,
        result.hit_tokens,
        result.block_size,
        result.cache_capacity_blocks,
        cache_bytes=cache_bytes,
        hardware=hardware,
        tier=tier,
    )
    report.update(extra)
    rows = report.get("per_request")
    if rows is not None:
        saved = cost.prefill_flops_saved.tolist()
        est = cost.est_ttft_saved_seconds
        est_list = est.tolist() if est is not None else None
        for i, row in enumerate(rows):
            row["prefill_flops_saved"] = saved[i]
            if est_list is not None:
                row["est_ttft_saved_seconds"] = est_list[i]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with noting():  # a line on stderr while numba compiles the kernels (first use only)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        if args.output:  # refused before any work: a named pipe, a device, a directory
            check_output_path(args.output)
        semantics = _semantics(args)
        capacity, cache_bytes, model, hardware = _sizing(args)
        trace = load_trace(args.trace, block_size=args.block_size, options=options_from_args(args))
        if model is not None:  # a byte count past int64 is refused before the replay
            check_cost(model, args.block_size, capacity=capacity, trace=trace)
        result = replay(
            trace,
            policy=args.policy,
            capacity=capacity,
            block_size=args.block_size,
            small_ratio=args.small_ratio,
            max_freq=args.max_freq,
            ghost_freq=args.ghost_freq,
            engine=args.engine,
            semantics=semantics,
        )
        report: dict[str, Any] = result.to_report(per_request=args.per_request)
        if model is not None:
            _add_cost(report, result, model, hardware, args.cache_tier, cache_bytes)
        if args.oddities:
            report["oddities"] = oddities(trace, result.block_size)
        text = json.dumps(report, indent=None if args.per_request else 2) + "\n"
        if args.output:
            write_text(args.output, text)
            print(
                f"{args.output}: report of {result.n_requests} requests written "
                f"(overall_hit_rate {result.overall_hit_rate:.4f})",
                file=sys.stderr,
            )
        else:
            sys.stdout.write(text)
    except PrefixSimError as err:
        print(error_line("prefixsim", err), file=sys.stderr)
        return 2
    except OSError as err:
        print(error_line("prefixsim", err), file=sys.stderr)
        return 2
    return 0
