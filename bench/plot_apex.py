#!/usr/bin/python3
"""Summarises scripts/bench-apex.sh runs (perserve_bench_apex JSON): by actor
count, the median sustained sample rate over repeats with its range, the
headroom over the Ape-X learner's 9.7K samples/s, the sample latencies at the
sustained phase, the intake and the load average; writes apex.csv,
apex-summary.json and apex.png (matplotlib, no display): each run's phases
(samples/s reached against the rate asked, held or not) and the headroom
by actor count.

Usage: plot_apex.py RESULTS_DIR
"""
import collections
import glob
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from results_files import load_and_summarize, save_chart  # noqa: E402


def load(directory):
    runs = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(directory, "run-*.json"))):
        with open(path) as f:
            run = json.load(f)
        run["path"] = os.path.basename(path)
        runs[(run["actors"], run["learners"])].append(run)
    return runs


def summarize(runs):
    rows = []
    for (actors, learners), group in sorted(runs.items()):
        sustained = [r["sustained_samples_per_s"] for r in group]
        median_run = sorted(group, key=lambda r: r["sustained_samples_per_s"])[len(group) // 2]
        phase = median_run["sustained_phase"] or {}
        latency = phase.get("latency_ms", {})
        loads = [r["load_average_before"][0] for r in group] + [r["load_average_after"][0] for r in group]
        rows.append({
            "actors": actors, "learners": learners, "repeats": len(group),
            "actor_steps_per_s": group[0]["actor_steps_per_s"],
            "intake_steps_per_s": group[0]["intake_steps_per_s"],
            "sustained_samples_per_s": statistics.median(sustained),
            "sustained_min": min(sustained), "sustained_max": max(sustained),
            "headroom": statistics.median(sustained) / group[0]["apex_learner_samples_per_s"],
            "headroom_min": min(sustained) / group[0]["apex_learner_samples_per_s"],
            "headroom_max": max(sustained) / group[0]["apex_learner_samples_per_s"],
            "unthrottled_samples_per_s": statistics.median(
                [p["samples_per_s"] for r in group for p in r["phases"] if p["rate_batches_per_s_per_learner"] is None]
                or [float("nan")]),
            "latency_p50_ms": latency.get("p50"), "latency_p90_ms": latency.get("p90"),
            "latency_p99_ms": latency.get("p99"),
            "load_average_min": min(loads), "load_average_max": max(loads),
        })
    return rows


def chart(runs, rows, directory):
    fig, (phases_ax, headroom_ax) = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, ((actors, learners), group) in enumerate(sorted(runs.items())):
        color = colors[index % len(colors)]
        for repeat, run in enumerate(group):
            asked = [p for p in run["phases"] if p["rate_batches_per_s_per_learner"] is not None]
            asked.sort(key=lambda p: p["rate_batches_per_s_per_learner"])
            x = [p["rate_batches_per_s_per_learner"] * run["batch"] * learners for p in asked]
            y = [p["samples_per_s"] for p in asked]
            phases_ax.plot(x, y, "-", color=color, alpha=0.5,
                           label=f"{actors} actors" if repeat == 0 else None)
            held = [(a, b) for a, b, p in zip(x, y, asked) if p["intake_held"] and p["samples_held"]]
            missed = [(a, b) for a, b, p in zip(x, y, asked) if not (p["intake_held"] and p["samples_held"])]
            if held:
                phases_ax.plot(*zip(*held), "o", color=color)
            if missed:
                phases_ax.plot(*zip(*missed), "x", color=color)
    top = max((p["samples_per_s"] for g in runs.values() for r in g for p in r["phases"]), default=1)
    phases_ax.plot([0, top], [0, top], ":", color="gray", label="as asked")
    phases_ax.axhline(19 * 512, color="black", linestyle="--", linewidth=1, label="Ape-X learner (9.7K/s)")
    phases_ax.set_xlabel("samples/s asked (all learners)")
    phases_ax.set_ylabel("samples/s reached")
    phases_ax.set_title("phases: o held (intake and samples), x missed")
    phases_ax.legend()
    actors = [r["actors"] for r in rows]
    med = [r["headroom"] for r in rows]
    err = [[m - r["headroom_min"] for m, r in zip(med, rows)], [r["headroom_max"] - m for m, r in zip(med, rows)]]
    headroom_ax.bar([str(a) for a in actors], med, yerr=err, capsize=4, color=colors[0])
    headroom_ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    headroom_ax.set_xlabel("actors")
    headroom_ax.set_ylabel("sustained samples/s over 9.7K")
    headroom_ax.set_title("headroom with the intake held (median, bars min-max)")
    fig.suptitle("perserve replay rank under the Ape-X load (Atari steps, n-step 3, stack obs:4; batches of 512)")
    return save_chart(fig, directory, "apex.png")


def main():
    directory = sys.argv[1]
    loaded = load_and_summarize(directory, load, summarize, "apex.csv")
    if loaded is None:
        return 1
    runs, rows = loaded
    with open(os.path.join(directory, "apex-summary.json"), "w") as f:
        json.dump(rows, f, indent=2)
    print(f"{'actors':>7}{'learners':>9}{'steps/s each':>13}{'sustained/s':>13}{'(min-max)':>18}{'headroom':>10}"
          f"{'p50 ms':>8}{'p90 ms':>8}{'p99 ms':>8}{'unthrottled/s':>15}{'load avg':>12}")
    for r in rows:
        fmt = lambda v: f"{v:8.1f}" if v is not None else f"{'-':>8}"
        print(f"{r['actors']:>7}{r['learners']:>9}{r['actor_steps_per_s']:>13.0f}{r['sustained_samples_per_s']:>13.0f}"
              f"{r['sustained_min']:>9.0f}-{r['sustained_max']:<8.0f}{r['headroom']:>10.2f}"
              f"{fmt(r['latency_p50_ms'])}{fmt(r['latency_p90_ms'])}{fmt(r['latency_p99_ms'])}"
              f"{r['unthrottled_samples_per_s']:>15.0f}{r['load_average_min']:>6.1f}-{r['load_average_max']:<5.1f}")
    print(f"\nchart: {chart(runs, rows, directory)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
