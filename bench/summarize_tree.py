#!/usr/bin/python3
"""Summarise perserve_bench_tree's Google Benchmark JSON as ratios.

Reads the JSON (repetitions are reduced to their median), prints a table of
wall times per row, and checks the targets as ratios within the one run:
batched descent >= 2x naive, cold batched descents (Descent/cold/*) >= 3x the
classic segment tree's and within 2x of the memory-level-parallelism limit,
warm ones (Descent/warm/*: the top levels cached, as in a serving loop) >= 3x
the classic segment tree's, "auto" within 1.1x of the fastest concrete
strategy at every batch size, "auto" against the classic pair of segment
trees (Update/classic/<k>, the reference point: >= 1.5x at the small batches
an actor sends, 8 and 50), and (when the CUDA rows ran) Sample/cuda/1024
and Update/cuda/1024 within 20 us of host wall time, with CPU/CUDA ratios. Writes the summary as JSON next to the input
(or to --out). Exit status 0 even when a target is missed: the figures are
the result; --strict makes a miss exit 1.
"""
import argparse
import json
import re
import statistics
import sys

STRATEGIES = ("per_element", "rebuild", "sparse")


def load_medians(path):
    with open(path) as f:
        data = json.load(f)
    samples = {}
    for row in data["benchmarks"]:
        if row.get("run_type") == "aggregate" or row.get("error_occurred"):
            continue
        name = row["run_name"] if "run_name" in row else row["name"]
        name = re.sub(r"(/iterations:\d+)?/(real|manual)_time$", "", name)
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[row["time_unit"]]
        samples.setdefault(name, []).append(row["real_time"] * scale)
    return data.get("context", {}), {name: statistics.median(v) for name, v in samples.items()}


def summarize(context, us):
    summary = {"context": {k: context.get(k) for k in ("date", "host_name", "num_cpus", "mhz_per_cpu")},
               "microseconds": us, "checks": {}}
    naive, batched = us.get("Descent/naive/512"), us.get("Descent/batched/512")
    if naive and batched:
        summary["checks"]["descent_batched_speedup"] = {"ratio": naive / batched, "target": 2.0,
                                                        "met": naive / batched >= 2.0}
    for k in (512, 1024):
        warm = {form: us.get(f"Descent/warm/{form}/{k}") for form in ("batched", "classic")}
        if None not in warm.values():
            summary["checks"][f"warm_descent_{k}_3x_classic"] = {
                "ratio": warm["classic"] / warm["batched"], "target": 3.0,
                "met": warm["classic"] / warm["batched"] >= 3.0}
        cold = {form: us.get(f"Descent/cold/{form}/{k}") for form in ("batched", "classic", "limit")}
        if None in cold.values():
            continue
        summary["checks"][f"cold_descent_{k}_3x_classic"] = {
            "ratio": cold["classic"] / cold["batched"], "target": 3.0, "met": cold["classic"] / cold["batched"] >= 3.0}
        summary["checks"][f"cold_descent_{k}_within_2x_limit"] = {
            "ratio": cold["batched"] / cold["limit"], "target": 2.0, "met": cold["batched"] / cold["limit"] <= 2.0}
    sizes = sorted({int(n.split("/")[2]) for n in us if n.startswith("Update/")})
    rows = []
    for k in sizes:
        times = {s: us.get(f"Update/{s}/{k}") for s in STRATEGIES + ("auto",)}
        concrete = {s: t for s, t in times.items() if s != "auto" and t is not None}
        if not concrete or times["auto"] is None:
            continue
        fastest = min(concrete, key=concrete.get)
        ratio = times["auto"] / concrete[fastest]
        rows.append({"k": k, **times, "fastest": fastest, "auto_over_fastest": ratio})
        summary["checks"][f"auto_within_1.1x_at_k{k}"] = {"ratio": ratio, "target": 1.1, "met": ratio <= 1.1}
        classic = us.get(f"Update/classic/{k}")
        if classic is not None:
            rows[-1]["classic"] = classic
            rows[-1]["classic_over_auto"] = classic / times["auto"]
            if k in (8, 50):
                summary["checks"][f"auto_1.5x_classic_at_k{k}"] = {"ratio": classic / times["auto"], "target": 1.5,
                                                                    "met": classic / times["auto"] >= 1.5}
    summary["updates"] = rows
    for row in ("Sample/cuda/1024", "Update/cuda/1024"):
        if row in us:
            summary["checks"][f"{row}_within_20us"] = {"ratio": us[row] / 20.0, "target": 1.0,
                                                      "met": us[row] <= 20.0}
    summary["cpu_over_cuda"] = {
        cpu: us[cpu] / us[cuda]
        for cpu, cuda in [("Sample/cpu/512", "Sample/cuda/512"), ("Sample/cpu/1024", "Sample/cuda/1024"),
                          ("Descent/batched/512", "Descent/cuda/512")]
        + [(f"Update/auto/{k}", f"Update/cuda/{k}") for k in (8, 50, 512, 1024, 2048, 32768)]
        if cpu in us and cuda in us}
    return summary


def print_table(summary, us):
    print(f"{'row':<28}{'median us':>12}")
    for name in sorted(us):
        print(f"{name:<28}{us[name]:>12.2f}")
    print()
    print(f"{'k':>7} " + "".join(f"{s:>13}" for s in STRATEGIES + ("auto",)) + f"{'fastest':>13}{'auto/fast':>11}"
          f"{'classic':>10}{'classic/auto':>14}")
    for row in summary["updates"]:
        cells = "".join(f"{row[s]:>13.1f}" for s in STRATEGIES + ("auto",))
        classic = f"{row['classic']:>10.1f}{row['classic_over_auto']:>14.2f}" if "classic" in row else ""
        print(f"{row['k']:>7} {cells}{row['fastest']:>13}{row['auto_over_fastest']:>11.2f}{classic}")
    print()
    for pair, ratio in summary["cpu_over_cuda"].items():
        print(f"{pair + ' cpu/cuda':<32} {ratio:.2f}")
    for name, check in summary["checks"].items():
        verdict = "met" if check["met"] else "MISSED"
        print(f"{name:<32} ratio {check['ratio']:.2f} (target {check['target']}): {verdict}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("json_in")
    parser.add_argument("--out")
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()
    context, us = load_medians(args.json_in)
    summary = summarize(context, us)
    print_table(summary, us)
    out = args.out or re.sub(r"\.json$", "", args.json_in) + "-summary.json"
    with open(out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"\nsummary written to {out}")
    if args.strict and not all(c["met"] for c in summary["checks"].values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
