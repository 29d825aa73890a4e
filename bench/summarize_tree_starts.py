#!/usr/bin/python3
"""Summarises scripts/bench-tree-starts.sh: one perserve_bench_tree JSON per
process start, each with its own calibration of "auto".

Per start and batch size k: the strategy that start's calibration chose for
k (its auto_table), and the time of that strategy's own row over the fastest
fixed strategy's (the choice; target: within 1.1x in every start); auto's
row over the fastest (the same choice, plus the rows' own noise: a 0.7 us
update's row moves 10-15% between runs on a busy machine); and the classic
segment trees' time over auto's (target: 1.5x at k = 8 and 50). Prints a table, writes the JSON
(--out); exit status 0 even when a target is missed (--strict: 1).
"""
import argparse
import json
import re
import sys

from summarize_tree import STRATEGIES, load_medians


def chosen(auto_table, k):
    """The strategy a calibration table (perserve's StrategyTable::Describe) names for batch size k:
    the line of the smallest measured power of two >= k."""
    picks = {int(m.group(1)): m.group(2) for m in re.finditer(r"k=(\d+):.*-> (\w+)", auto_table or "")}
    sizes = [size for size in sorted(picks) if size >= k]
    return picks[sizes[0]] if sizes else None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("json_in", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()
    starts = []
    for path in args.json_in:
        context, us = load_medians(path)
        sizes = sorted({int(n.split("/")[2]) for n in us if n.startswith("Update/")})
        rows = {}
        for k in sizes:
            fixed = {s: us[f"Update/{s}/{k}"] for s in STRATEGIES if f"Update/{s}/{k}" in us}
            auto, classic = us.get(f"Update/auto/{k}"), us.get(f"Update/classic/{k}")
            if not fixed or auto is None:
                continue
            fastest = min(fixed, key=fixed.get)
            choice = chosen(context.get("auto_table"), k)
            rows[k] = {"auto_us": auto, "fastest": fastest, "fastest_us": fixed[fastest], "chosen": choice,
                       "chosen_over_fastest": fixed[choice] / fixed[fastest] if choice in fixed else None,
                       "auto_over_fastest": auto / fixed[fastest],
                       "classic_over_auto": classic / auto if classic else None}
        starts.append({"file": path, "auto_table": context.get("auto_table"), "rows": rows})
    sizes = sorted({k for s in starts for k in s["rows"]})
    checks = {}
    print(f"{'k':>7}" + "".join(f"{'start ' + str(i + 1):>26}" for i in range(len(starts))))
    for k in sizes:
        cells = []
        for s in starts:
            row = s["rows"].get(k)
            cells.append(f"{row['chosen'][:6]:>7} {row['chosen_over_fastest'] or 0:>5.2f} {row['auto_over_fastest']:>5.2f}"
                         f" {row['classic_over_auto'] or 0:>5.2f}" if row else f"{'':>26}")
        print(f"{k:>7}" + "".join(f"{c:>26}" for c in cells))
        worst = max(s["rows"][k]["chosen_over_fastest"] or float("inf") for s in starts if k in s["rows"])
        checks[f"auto_choice_within_1.1x_at_k{k}_every_start"] = {"ratio": worst, "target": 1.1, "met": worst <= 1.1}
        worst_row = max(s["rows"][k]["auto_over_fastest"] for s in starts if k in s["rows"])
        checks[f"auto_row_within_1.1x_at_k{k}_every_start"] = {"ratio": worst_row, "target": 1.1,
                                                               "met": worst_row <= 1.1}
        if k in (8, 50):
            least = min(s["rows"][k]["classic_over_auto"] or 0 for s in starts if k in s["rows"])
            checks[f"auto_1.5x_classic_at_k{k}_every_start"] = {"ratio": least, "target": 1.5, "met": least >= 1.5}
    print("(each cell: the strategy auto chose, its row / the fastest fixed row, auto's row / the fastest, "
          "classic / auto)")
    for name, check in checks.items():
        print(f"{name:<48} {check['ratio']:.2f} (target {check['target']}): {'met' if check['met'] else 'MISSED'}")
    with open(args.out, "w") as f:
        json.dump({"starts": starts, "checks": checks}, f, indent=2)
    print(f"summary written to {args.out}")
    return 1 if args.strict and not all(c["met"] for c in checks.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
