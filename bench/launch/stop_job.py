"""Seconds from Ctrl-C to a job's end under perserve-launch, with a full
replay of Atari-sized transitions (issue 37; docs/launch.md).

For each size: a job under `python3 -m perserve.launch` (its own session,
as a terminal's foreground job) of one server (--prefault-store, capacity
sized to GB, the checkpoint under WORK) and two actors and a learner
(tests/python/checkpoint_job.py `term`: they add and sample until the
server answers UNAVAILABLE). Once the stats line says the replay is full,
SIGINT to the job's process group; then the times of the server's final
checkpoint (from its log) and of the job's end. Writes OUT.json.

With --mpirun first, the same job as before the launcher, for comparison:
plain mpirun with scripts/mpi-env.sh's settings (a 30 s grace), Ctrl-C to
mpirun (the clients' python under -m mpi4py).

Usage: stop_job.py [--mpirun] BUILD_DIR WORK_DIR OUT.json GB [GB ...]
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
plain = sys.argv[1] == "--mpirun"
arguments = sys.argv[2:] if plain else sys.argv[1:]
build, work, out = arguments[:3]
sizes = [float(gb) for gb in arguments[3:]]
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
           "OMPI_MCA_btl_vader_eager_limit": "16384", "OMPI_MCA_odls_base_sigkill_timeout": "30",
           "OMP_WAIT_POLICY": "passive"}  # scripts/mpi-env.sh
COLUMNS = ["--column", "id:int64", "--column", "obs:uint8:84,84,4", "--column", "action:int64",
           "--column", "reward:float32", "--column", "next_obs:uint8:84,84,4", "--column", "done:uint8"]
ITEM_BYTES = 8 + 2 * 84 * 84 * 4 + 8 + 4 + 1


def logged_at(line):
    """The server's own time of a log line ([HH:MM:SS.mmm], seconds since
    midnight): mpirun forwards output late while it sleeps out its grace."""
    match = re.match(r"\[(\d\d):(\d\d):(\d\d\.\d+)\]", line)
    return None if match is None else int(match.group(1)) * 3600 + int(match.group(2)) * 60 + float(match.group(3))


def since_midnight():
    now = time.localtime()
    return now.tm_hour * 3600 + now.tm_min * 60 + now.tm_sec + time.time() % 1


def run(gb):
    capacity = int(gb * 1e9 / ITEM_BYTES)
    checkpoints = os.path.join(work, f"stop-{gb:g}gb")
    shutil.rmtree(checkpoints, ignore_errors=True)
    server = [os.path.join(build, "server", "perserve-server"), *COLUMNS, "--capacity", str(capacity),
              "--prefault-store", "--min-size-to-sample", "1000", "--stats-interval", "1", "--checkpoint-dir",
              checkpoints]
    client = os.path.join(root, "tests", "python", "checkpoint_job.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    if plain:
        command = ["mpirun", "-np", "1", *server, ":", "-np", "3", sys.executable, "-m", "mpi4py", client, "term", "1"]
        env.update(MPI_ENV)
    else:
        command = [sys.executable, "-m", "perserve.launch", "-n", "1", *server, ":", "-n", "3", client, "term", "1"]
    started = time.monotonic()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           start_new_session=True)
    result = {"gb": gb, "capacity": capacity, "item_bytes": ITEM_BYTES, "launcher": "mpirun" if plain else
              "perserve-launch"}
    stopped = None
    for line in job.stdout:
        now = time.monotonic()
        if stopped is None and re.search(rf"\] size {capacity} \|", line):
            result["full_after_s"] = round(now - started, 1)
            os.killpg(job.pid, signal.SIGINT)  # the terminal's Ctrl-C: mpirun leads the group when plain
            stopped, stopped_clock = now, since_midnight()
        elif (match := re.search(r"checkpoint: \S+ is complete: ([\d.]+) MB in ([\d.]+) s", line)) and stopped:
            result["checkpoint_mb"] = float(match.group(1))
            result["checkpoint_write_s"] = float(match.group(2))
            result["checkpoint_complete_after_ctrl_c_s"] = round(logged_at(line) - stopped_clock, 2)
        elif stopped is not None and re.search(r"perserve-launch|checkpoint: writing|SIGTERM:|Forwarding|killed|Killed",
                                               line):
            at = logged_at(line)
            print(f"{(at - stopped_clock) if at else now - stopped:7.2f} s after Ctrl-C: {line}", end="", flush=True)
    job.wait()
    ended = time.monotonic()
    result["exit_status"] = job.returncode
    if stopped is not None:
        result["ended_after_ctrl_c_s"] = round(ended - stopped, 2)
        if "checkpoint_complete_after_ctrl_c_s" in result:
            result["ended_after_checkpoint_s"] = round(result["ended_after_ctrl_c_s"] -
                                                       result["checkpoint_complete_after_ctrl_c_s"], 2)
    print(json.dumps(result), flush=True)
    shutil.rmtree(checkpoints, ignore_errors=True)
    return result


results = [run(gb) for gb in sizes]
with open(out, "w") as f:
    json.dump({"machine_cores": os.cpu_count(), "runs": results}, f, indent=2)
