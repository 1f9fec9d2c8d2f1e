"""CI: check one point of a run directory against the plain-Python reference replay.

    python .ci/check_run.py RUN_DIR

RUN_DIR holds the output of ``python -m sweep capacity=1024,2048,4096 policy=S3FIFO,LRU`` made by
an installed wheel; this script runs from the source checkout (``PYTHONPATH=src``), so the
expected numbers come from the checkout's reference implementation, not from the code under
test. Exit status 1 and a message when anything differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from prefixsim import load_trace, replay

POLICY, CAPACITY = "S3FIFO", 4096


def main(run_dir: Path) -> int:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    if manifest["status"] != "complete" or manifest["points"]["computed"] != 6:
        print(f"check_run: {run_dir}: status {manifest['status']}, points {manifest['points']}")
        return 1
    results = pq.read_table(run_dir / "results.parquet").to_pylist()
    row = next(r for r in results if r["policy"] == POLICY and r["capacity"] == CAPACITY)
    per_request = pq.read_table(
        run_dir / "per_request.parquet", filters=[("point_id", "==", row["point_id"])]
    )
    want = replay(load_trace("conversation"), POLICY, CAPACITY, engine="reference")
    got = per_request.column("hit_tokens").to_numpy()
    if row["total_hit_tokens"] != want.total_hit_tokens or not np.array_equal(got, want.hit_tokens):
        print(
            f"check_run: {POLICY} at {CAPACITY} blocks: {row['total_hit_tokens']} hit tokens, "
            f"the reference says {want.total_hit_tokens}"
        )
        return 1
    if not any((run_dir / "figures").glob("*.png")):
        print(f"check_run: no figures in {run_dir / 'figures'}")
        return 1
    print(f"check_run: {POLICY} at {CAPACITY} blocks: {want.total_hit_tokens} hit tokens, correct")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
