"""How fast the performance model scores candidate layouts, against the AutoConfigurator's budget, in one run.

    python3 benchmarks/estimate_speed.py [--layouts 1000] [--config gpt3/5b]

Composes the training config once (as the launcher does), then times score_layouts over a grid of TP, PP, virtual
stages, micro-batch and recomputation settings on 16 nodes, repeated up to the number asked for. Prints the time,
the rate, whether torch was imported, and last `ratio=<seconds / 2 s budget>` (the issue's budget: 1,000 layouts in
under 2 s; below 1 is within it).
"""

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nemo_launcher.contract.performance import Layout, score_layouts  # noqa: E402
from nemo_launcher.launch.stage_config import stage_config  # noqa: E402

BUDGET_S = 2.0  # for 1,000 layouts


def candidate_layouts(count: int, nodes: int, gbs: int) -> list[Layout]:
    grid = itertools.product((1, 2, 4, 8), (1, 2, 4, 8), (1, 2), (1, 2, 4, 8), (None, "selective", "full"))
    layouts = [
        Layout(tp=tp, pp=pp, vp=vp, mbs=mbs, gbs=gbs, recompute=recompute, nodes=nodes, sequence_parallel=tp > 1)
        for tp, pp, vp, mbs, recompute in grid
    ]
    return list(itertools.islice(itertools.cycle(layouts), count))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", type=int, default=1000)
    parser.add_argument("--config", default="gpt3/5b", help="a training config, e.g. gpt3/175b")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        stage = stage_config("training", args.config, Path(scratch) / "data", Path(scratch) / "results")
    layouts = candidate_layouts(args.layouts, stage["trainer"]["num_nodes"], stage["model"]["global_batch_size"])
    start = time.perf_counter()
    estimates = score_layouts(stage, layouts, "a100-80gb")
    elapsed = time.perf_counter() - start
    fitting = sum(est.fits for est in estimates)
    budget = BUDGET_S * args.layouts / 1000
    print(f"{args.config}: {len(estimates)} layouts scored in {elapsed:.3f} s ({len(estimates) / elapsed:,.0f}/s)")
    print(f"{fitting} of them predicted to fit an a100-80gb; torch imported: {'torch' in sys.modules}")
    print(f"ratio={elapsed / budget:.3f}")


if __name__ == "__main__":
    main()
