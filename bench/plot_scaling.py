#!/usr/bin/python3
"""Summarises scripts/bench-scaling.sh runs: medians and ranges over repeats,
MPI vs ZeroMQ intake ratios, a CSV, and PNG charts (matplotlib, no display).

Usage: plot_scaling.py RESULTS_DIR
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

METRICS = ("items_per_s", "intake_mb_per_s", "samples_per_s", "intake_over_raw_mpi", "raw_mpi_mb_per_s",
           "sample_over_raw_mpi", "server_cpu_s_per_gb")


def load(directory):
    runs = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(directory, "run-*.json"))):
        with open(path) as f:
            run = json.load(f)
        transport = run["transport"]
        if transport == "mpi" and run.get("zero_copy_min_row_bytes", 0) < 0:
            transport = "mpi-copy"  # the server copies intake and sample rows (the data path before zero copy)
        runs[(transport, run["size"], run["actors"], run.get("servers", 1))].append(run)
    return runs


def summarize(runs):
    rows = []
    for (transport, size, actors, servers), group in sorted(runs.items()):
        row = {"transport": transport, "size": size, "actors": actors, "servers": servers, "repeats": len(group)}
        for metric in METRICS + ("latency_median_ms", "latency_p99_ms"):
            if metric.startswith("latency"):
                values = [r["sample_latency_ms"]["median" if "median" in metric else "p99"] for r in group]
            else:
                values = [r.get(metric, float("nan")) for r in group]
            row[metric] = statistics.median(values)
            row[metric + "_min"] = min(values)
            row[metric + "_max"] = max(values)
        rows.append(row)
    return rows


def ratios(rows):
    by_key = {(r["transport"], r["size"], r["actors"]): r for r in rows if r["servers"] == 1}
    out = []
    for (transport, size, actors), row in sorted(by_key.items()):
        zmq = by_key.get(("zmq", size, actors))
        if transport == "mpi" and zmq:
            out.append({"size": size, "actors": actors, "mpi_over_zmq_intake": row["items_per_s"] / zmq["items_per_s"],
                        "mpi_over_zmq_samples": row["samples_per_s"] / zmq["samples_per_s"]})
    return out


def path_ratios(rows):
    """The zero-copy data path (mpi) against the copying one (mpi-copy), same size and actors."""
    copy = {(r["size"], r["actors"]): r for r in rows if r["transport"] == "mpi-copy" and r["servers"] == 1}
    out = []
    for r in rows:
        base = copy.get((r["size"], r["actors"]))
        if r["transport"] == "mpi" and r["servers"] == 1 and base:
            out.append({"size": r["size"], "actors": r["actors"],
                        "intake_ratio": r["items_per_s"] / base["items_per_s"],
                        "samples_ratio": r["samples_per_s"] / base["samples_per_s"],
                        "cpu_per_gb_ratio": r["server_cpu_s_per_gb"] / base["server_cpu_s_per_gb"]})
    return out


def shard_ratios(rows):
    """Several server ranks against one, same size and actors (MPI)."""
    one = {(r["size"], r["actors"]): r for r in rows if r["transport"] == "mpi" and r["servers"] == 1}
    out = []
    for r in rows:
        base = one.get((r["size"], r["actors"]))
        if r["transport"] == "mpi" and r["servers"] > 1 and base:
            out.append({"size": r["size"], "actors": r["actors"], "servers": r["servers"],
                        "intake_ratio": r["items_per_s"] / base["items_per_s"],
                        "samples_ratio": r["samples_per_s"] / base["samples_per_s"]})
    return out


def chart(rows, directory):
    sizes = sorted({r["size"] for r in rows})
    fig, axes = plt.subplots(2, len(sizes), figsize=(6 * len(sizes), 8), squeeze=False)
    for column, size in enumerate(sizes):
        for transport, style in (("mpi", "o-"), ("mpi-copy", "^-."), ("zmq", "s--")):
            sel = sorted((r for r in rows if r["size"] == size and r["transport"] == transport and r["servers"] == 1),
                         key=lambda r: r["actors"])
            if not sel:
                continue
            actors = [r["actors"] for r in sel]
            for row_index, (metric, label) in enumerate((("intake_mb_per_s", "intake MB/s"),
                                                         ("latency_median_ms", "sample-512 latency, median ms"))):
                ax = axes[row_index][column]
                med = [r[metric] for r in sel]
                err = [[m - r[metric + "_min"] for m, r in zip(med, sel)], [r[metric + "_max"] - m for m, r in zip(med, sel)]]
                ax.errorbar(actors, med, yerr=err, fmt=style, capsize=3, label=transport.upper())
                ax.set_xlabel("actors")
                ax.set_ylabel(label)
                ax.set_title(f"{size} transitions")
                ax.set_xscale("log", base=2)
                ax.legend()
        mpi = sorted((r for r in rows if r["size"] == size and r["transport"] == "mpi" and r["servers"] == 1),
                     key=lambda r: r["actors"])
        if mpi:
            axes[0][column].plot([r["actors"] for r in mpi], [r["raw_mpi_mb_per_s"] for r in mpi], ":",
                                 color="gray", label="raw MPI, same message size")
            axes[0][column].legend()
    names = {"mpi": "MPI", "mpi-copy": "MPI with the server copying (mpi-copy)", "zmq": "ZeroMQ"}
    present = [names[t] for t in ("mpi", "mpi-copy", "zmq") if any(r["transport"] == t for r in rows)]
    fig.suptitle(f"perserve replay rank: {' vs '.join(present)} (medians over repeats, bars: min-max)")
    return save_chart(fig, directory, "scaling.png")


def main():
    directory = sys.argv[1]
    loaded = load_and_summarize(directory, load, summarize, "scaling.csv")
    if loaded is None:
        return 1
    _, rows = loaded
    print(f"{'transport':<10}{'size':<7}{'actors':>7}{'servers':>8}{'items/s':>12}{'MB/s':>9}{'x raw':>7}"
          f"{'samples/s':>12}{'x raw':>7}{'cpu s/GB':>9}{'lat med ms':>11}{'p99 ms':>9}")
    for r in rows:
        print(f"{r['transport']:<10}{r['size']:<7}{r['actors']:>7}{r['servers']:>8}{r['items_per_s']:>12.0f}"
              f"{r['intake_mb_per_s']:>9.1f}{r['intake_over_raw_mpi']:>7.3f}{r['samples_per_s']:>12.0f}"
              f"{r['sample_over_raw_mpi']:>7.3f}{r['server_cpu_s_per_gb']:>9.3f}"
              f"{r['latency_median_ms']:>11.3f}{r['latency_p99_ms']:>9.3f}")
    print()
    paths = path_ratios(rows)
    for r in paths:
        print(f"{r['size']:<6} {r['actors']} actors, zero-copy over copying data path: intake "
              f"{r['intake_ratio']:.2f}x, samples {r['samples_ratio']:.2f}x, server CPU per GB "
              f"{r['cpu_per_gb_ratio']:.2f}x")
    if paths:
        with open(os.path.join(directory, "data_paths.json"), "w") as f:
            json.dump(paths, f, indent=2)
        print()
    shards = shard_ratios(rows)
    for r in shards:
        print(f"{r['size']:<6} {r['actors']} actors, {r['servers']} servers over 1: intake {r['intake_ratio']:.2f}x, "
              f"samples {r['samples_ratio']:.2f}x")
    if shards:
        with open(os.path.join(directory, "shards.json"), "w") as f:
            json.dump(shards, f, indent=2)
        print()
    for r in ratios(rows):
        print(f"MPI/ZeroMQ {r['size']:<6} {r['actors']} actors: intake {r['mpi_over_zmq_intake']:.2f}x, "
              f"samples {r['mpi_over_zmq_samples']:.2f}x")
    with open(os.path.join(directory, "ratios.json"), "w") as f:
        json.dump(ratios(rows), f, indent=2)
    print(f"\nchart: {chart(rows, directory)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
