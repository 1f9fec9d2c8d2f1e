"""How closely ``python -m prefixsim.synth --like conversation`` matches the bundled trace.

    python experiments/synth_match.py [--seeds N]

Prints, for the bundled Mooncake conversation trace and the preset at seeds 0..N-1 (block_size
512): requests, mean and median prompt tokens, distinct blocks and the infinite-cache hit rate,
with the relative (or, for the hit rate, absolute) differences. Note: Mooncake's trace hashes
each request's partial last block too (``ceil(input_length / 512)`` ids), which adds one mostly
unique block per request to its distinct count; the generator, like a serving engine, hashes
full blocks only.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

import prefixsim
from prefixsim.synth import PRESETS, plan_trace, synth_plan


def row(trace: prefixsim.Trace) -> dict[str, float]:
    return {
        "requests": trace.n_requests,
        "mean": float(trace.input_lengths.mean()),
        "median": float(np.median(trace.input_lengths)),
        "blocks": trace.n_blocks,
        "hit": prefixsim.ceiling(trace, 512).overall_hit_rate,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    ref = row(prefixsim.load_trace("conversation"))
    print(f"{'trace':<14}{'requests':>9}{'mean':>9}{'median':>9}{'blocks':>9}{'hit rate':>10}")
    print(
        f"{'conversation':<14}{ref['requests']:>9}{ref['mean']:>9.0f}{ref['median']:>9.0f}"
        f"{ref['blocks']:>9}{ref['hit']:>10.4f}"
    )
    for seed in range(args.seeds):
        cfg = dataclasses.replace(PRESETS["conversation"], seed=seed)
        r = row(plan_trace(synth_plan(cfg), 512))
        d = {k: r[k] / ref[k] - 1 for k in ("mean", "median", "blocks")}
        hit_pt = 100 * (r["hit"] - ref["hit"])
        print(
            f"{'seed ' + str(seed):<14}{r['requests']:>9}{r['mean']:>9.0f}{r['median']:>9.0f}"
            f"{r['blocks']:>9}{r['hit']:>10.4f}   mean {d['mean']:+.1%}  median "
            f"{d['median']:+.1%}  blocks {d['blocks']:+.1%}  hit {hit_pt:+.2f} pt"
        )


if __name__ == "__main__":
    main()
