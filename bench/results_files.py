"""Files the benchmark summaries write beside their results: a CSV of rows
(dicts with the same keys) and a chart, for bench/plot_*.py."""
import os


def write_csv(rows, path):
    """One line of keys, then one line a row, in the first row's key order."""
    with open(path, "w") as f:
        keys = list(rows[0].keys())
        f.write(",".join(keys) + "\n")
        for row in rows:
            f.write(",".join(str(row[k]) for k in keys) + "\n")


def save_chart(fig, directory, name):
    """Lays out and saves a matplotlib figure as directory/name; returns the path."""
    fig.tight_layout()
    path = os.path.join(directory, name)
    fig.savefig(path, dpi=110)
    return path


def load_and_summarize(directory, load, summarize, csv_name):
    """The runs under `directory` (load(directory): a dict, empty when there
    are none), their summary rows (summarize(runs)), written as csv_name
    there. Returns (runs, rows), or None after saying so when there are no runs."""
    runs = load(directory)
    if not runs:
        print(f"no run-*.json in {directory}")
        return None
    rows = summarize(runs)
    write_csv(rows, os.path.join(directory, csv_name))
    return runs, rows
