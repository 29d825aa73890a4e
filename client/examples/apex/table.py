"""The results table of docs/apex.md from a bench.sh output folder, and one
figure with every run's curve.

    /usr/bin/python3 client/examples/apex/table.py BENCH_DIR [CURVE.png]
"""
from __future__ import annotations

import json
import os
import statistics
import sys

from results import plot_runs


def load(bench_dir: str) -> list[dict]:
    runs = []
    for name in sorted(os.listdir(bench_dir)):
        path = os.path.join(bench_dir, name, "results.json")
        if os.path.exists(path):
            runs.append(json.load(open(path)))
    return runs


def configuration(results: dict) -> str:
    if results.get("agent") == "baseline":
        return "baseline (1 process)"
    name = f"Ape-X, {results['actors']} actor{'s' if results['actors'] > 1 else ''}"
    spi = results.get("samples_per_insert", 0)
    return f"{name}, {spi:g} samples per insert" if spi else name


def main() -> int:
    runs = load(sys.argv[1])
    groups: dict[str, list[dict]] = {}
    for results in sorted(runs, key=lambda r: (r.get("agent") == "baseline", r["actors"], r["seed"])):
        groups.setdefault(configuration(results), []).append(results)
    print("| configuration | seed | solved | seconds to solve | env steps to solve | learner steps to solve "
          "| best greedy return | env steps/s | learner steps/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, group in groups.items():
        for r in group:
            solved = "yes" if r["solved"] else f"no ({r['seconds']:.0f} s)"
            rate = r["env_steps"] / r["seconds"]
            print(f"| {name} | {r['seed']} | {solved} | {r['seconds_to_solve'] and round(r['seconds_to_solve'], 1) or '-'} | "
                  f"{r['env_steps_to_solve'] or '-'} | {r['learner_steps_to_solve'] or '-'} | "
                  f"{r['best_greedy_return']} | {rate:.0f} | {r['learner_steps'] / r['seconds']:.0f} |")
    print()
    print("| configuration | runs solved | median seconds to solve | median env steps to solve |")
    print("|---|---|---|---|")
    for name, group in groups.items():
        solved = [r for r in group if r["solved"]]
        seconds = statistics.median(r["seconds_to_solve"] for r in solved) if solved else None
        steps = statistics.median(r["env_steps_to_solve"] for r in solved) if solved else None
        print(f"| {name} | {len(solved)} of {len(group)} | {f'{seconds:.1f}' if seconds is not None else '-'} | "
              f"{int(steps) if steps is not None else '-'} |")
    if len(sys.argv) > 2:
        plot_runs(runs, sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
