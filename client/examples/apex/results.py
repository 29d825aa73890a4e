"""What a run records: the greedy evaluations (wall time, environment steps,
learner steps, mean return), the first time the mean reached the solved
return, and at the end `results.json` and a learning-curve PNG."""
from __future__ import annotations

import json
import os
import time


class RunLog:
    def __init__(self, out_dir: str, solved_return: float, **about) -> None:
        self.out_dir = out_dir
        self.solved_return = solved_return
        self.about = about
        self.start = time.monotonic()
        self.evaluations: list[dict] = []
        self.solved_at: dict | None = None

    def restart(self) -> None:
        """Starts the clock again (after the job's start-up)."""
        self.start = time.monotonic()

    def seconds(self) -> float:
        return time.monotonic() - self.start

    def record(self, mean_return: float, env_steps: int, learner_steps: int, seconds: float | None = None) -> bool:
        """Adds one evaluation; True once the run is solved."""
        point = {"seconds": round(self.seconds() if seconds is None else seconds, 3), "env_steps": int(env_steps),
                 "learner_steps": int(learner_steps), "greedy_return": round(mean_return, 2)}
        self.evaluations.append(point)
        print(f"eval t={point['seconds']:.1f}s env_steps={env_steps} learner_steps={learner_steps} "
              f"greedy_return={mean_return:.1f}", flush=True)
        if self.solved_at is None and mean_return >= self.solved_return:
            self.solved_at = point
        return self.solved_at is not None

    def write(self, **totals) -> dict:
        best = max((p["greedy_return"] for p in self.evaluations), default=0.0)
        results = {
            "solved": self.solved_at is not None,
            "seconds_to_solve": self.solved_at["seconds"] if self.solved_at else None,
            "env_steps_to_solve": self.solved_at["env_steps"] if self.solved_at else None,
            "learner_steps_to_solve": self.solved_at["learner_steps"] if self.solved_at else None,
            "best_greedy_return": best,
            "solved_return": self.solved_return,
            **self.about,
            **totals,
            "seconds": round(self.seconds(), 3),
            "evaluations": self.evaluations,
        }
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        plot_runs([results], os.path.join(self.out_dir, "curve.png"))
        return results


def label(results: dict) -> str:
    kind = results.get("agent", "apex")
    name = f"Ape-X, {results['actors']} actor{'s' if results['actors'] != 1 else ''}" if kind == "apex" \
        else "baseline (1 env loop, no MPI)"
    if results.get("samples_per_insert"):
        name += f", {results['samples_per_insert']:g} samples/insert"
    return f"{name}, seed {results['seed']}"


def plot_runs(runs: list[dict], path: str) -> None:
    """Greedy return against wall time and against environment steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (by_time, by_steps) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {}
    for results in runs:
        key = (results.get("agent", "apex"), results["actors"], results.get("samples_per_insert", 0))
        color = colors.setdefault(key, f"C{len(colors)}")
        points = results["evaluations"]
        name = label(results)
        by_time.plot([p["seconds"] for p in points], [p["greedy_return"] for p in points], color=color,
                     alpha=0.8, label=name)
        counted = [p for p in points if p["env_steps"] > 0]  # a log axis: Ape-X takes 10-30x the steps
        by_steps.plot([p["env_steps"] for p in counted], [p["greedy_return"] for p in counted], color=color,
                      alpha=0.8, label=name)
    for axes, xlabel in ((by_time, "wall time (s)"), (by_steps, "environment steps")):
        axes.axhline(runs[0]["solved_return"], color="grey", linestyle="--", linewidth=1)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(f"greedy return (mean of {20} episodes)")
        axes.grid(alpha=0.3)
    by_steps.set_xscale("log")
    by_steps.set_xlim(left=1000)  # the first evaluations, before the replay can be sampled
    by_steps.legend(fontsize=7)
    figure.suptitle("CartPole-v1, double DQN with prioritized replay on a 2-core machine")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


if __name__ == "__main__":
    # plot several runs into one figure: results.py OUT.png DIR...
    import sys
    plot_runs([json.load(open(os.path.join(d, "results.json"))) for d in sys.argv[2:]], sys.argv[1])
