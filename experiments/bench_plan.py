"""Time ``python -m sweep --cfg job`` on long ``range()`` grids: the compact interpolation
(``capacity=range(1,N+1)`` as typed) beside the same grid as an explicit list, which goes
through Hydra's override parser (quadratic in the list's length), in the same run.

    python experiments/bench_plan.py [N ...]    # default: 2000 5000 10000 100000

The explicit list is skipped above 10,000 values (it takes minutes there).
"""

from __future__ import annotations

import subprocess
import sys
import time

LIST_LIMIT = 10_000


def seconds(override: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "sweep", "--cfg", "job", override],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def main(sizes: list[int]) -> None:
    print(f"{'N':>8}  {'range() (compact)':>18}  {'explicit list':>14}")
    for n in sizes:
        compact = seconds(f"capacity=range(1,{n + 1})")
        if n <= LIST_LIMIT:
            listed = f"{seconds('capacity=[' + ','.join(map(str, range(1, n + 1))) + ']'):.2f} s"
        else:
            listed = "skipped"
        print(f"{n:>8}  {compact:>16.2f} s  {listed:>14}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2000, 5000, 10_000, 100_000])
