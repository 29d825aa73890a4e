"""perserve-launch ends a job on Ctrl-C with its final checkpoint, a moment
after that checkpoint is complete, and a second Ctrl-C still ends it
(issue 37; docs/launch.md).

Each job runs under `python3 -m perserve.launch` in its own session, as a
terminal would run it, and Ctrl-C is SIGINT to that session's process
group, as a terminal sends it. The launcher sizes Open MPI's SIGKILL grace
from the checkpoint it is told to expect (--checkpoint-seconds 20: a grace
of 40 s), so a job ended by mpirun's own kill sequence would take at least
twice that after the signal: ending within STOP_BOUND seconds of the
server's "is complete" line shows the launcher's stop ended it, not Open
MPI's. The launcher's own settings are checked too: the grace in mpirun's
environment, oversubscription, the root flag.

Run over shared memory and, with OMPI_MCA_btl set (ctest's _tcp twin), as
`--transport tcp`: every rank over TCP, as between nodes.

Usage: launch_jobs.py SERVER PYTHON CLIENT_SCRIPT WORK_DIR
"""
import os
import re
import shutil
import signal
import sys
import time

from job_driver import Job, expect, failures

server, python, client, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
STOP_BOUND = 10.0  # seconds from the final checkpoint's completion to the job's end
# What the launcher must set by itself: none of it comes from the test's environment.
env = {k: v for k, v in os.environ.items()
       if not k.startswith(("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_MCA_rmaps_base_oversubscribe",
                            "OMPI_MCA_odls_base_sigkill_timeout", "OMPI_MCA_btl", "OMPI_MCA_pml"))}
transport = ["--transport", "tcp"] if "OMPI_MCA_btl" in os.environ else []
print(f"== over {'TCP (--transport tcp)' if transport else 'shared memory'}")
large = ["--column", "id:int64", "--column", "obs:uint8:100000", "--capacity", "4000", "--min-size-to-sample", "100",
         "--stats-interval", "0"]


def launch(client_args, *server_flags):
    return Job([python, "-m", "perserve.launch", "--checkpoint-seconds", "20", *transport,
                "-n", "1", server, *large, *server_flags, ":", "-n", "3", client, *client_args],
               env=env, new_session=True)


def processes():
    """(pid, the fields of /proc/PID/stat after its name: state, ppid, pgrp, session, ...)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    yield int(entry), f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue


def session_of_mpirun(launcher_pid):
    """mpirun's pid: the launcher's child (the session mpirun leads)."""
    return next((pid for pid, fields in processes() if int(fields[1]) == launcher_pid), None)


def alive_in_session(session):
    return [pid for pid, fields in processes() if int(fields[3]) == session and fields[0] != "Z"]


def check_settings(name, job, mpirun):
    with open(f"/proc/{mpirun}/environ", "rb") as f:
        environ = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    with open(f"/proc/{mpirun}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    grace = environ.get(b"OMPI_MCA_odls_base_sigkill_timeout")
    if grace != b"40":
        failures.append(f"{name}: mpirun's OMPI_MCA_odls_base_sigkill_timeout is {grace}, expected 40 (20 s checkpoint)")
    if (b"--allow-run-as-root" in argv) != (os.geteuid() == 0):
        failures.append(f"{name}: --allow-run-as-root {'missing as root' if os.geteuid() == 0 else 'not as root'}")
    oversubscribed = 4 > len(os.sched_getaffinity(0))
    if oversubscribed and b"--oversubscribe" not in argv:
        failures.append(f"{name}: 4 ranks on {len(os.sched_getaffinity(0))} CPUs without --oversubscribe")
    if transport and b"tcp,self" not in argv:
        failures.append(f"{name}: --transport tcp but mpirun's arguments have no btl tcp,self: {argv}")
    print(f"== {name}: mpirun has grace {grace.decode() if grace else None}, root flag "
          f"{b'--allow-run-as-root' in argv}, oversubscribed {b'--oversubscribe' in argv}")


def ctrl_c(name, twice):
    checkpoints = os.path.join(work, name.split()[0].lower())
    job = launch(["term", "1"], "--checkpoint-dir", checkpoints)
    serving = job.wait_for(r"serving 3 clients", 120)
    if not serving:
        rc, out = job.finish(60)
        failures.append(f"{name}: the job did not serve:\n{out}")
        return None
    mpirun = session_of_mpirun(job.process.pid)
    check_settings(name, job, mpirun)
    time.sleep(3)  # the store fills
    os.killpg(job.process.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
    stopped = time.monotonic()
    if twice:
        job.wait_for(r"checkpoint: writing .*\(SIGTERM", 30)
        os.killpg(job.process.pid, signal.SIGINT)
        again = time.monotonic()
        rc, out = job.finish(30)
        ended = time.monotonic()
        print(f"== {name}: the job ended {ended - again:.1f} s after the second Ctrl-C, exit status {rc}")
        left = alive_in_session(mpirun) if mpirun else []
        if left:
            failures.append(f"{name}: processes of the job still alive: {left}")
        if ended - again > STOP_BOUND or rc == 0:
            failures.append(f"{name}: expected the job to end at once with a non-zero status, took "
                            f"{ended - again:.1f} s, status {rc}:\n{out}")
        expect(f"{name}: the launcher says it ended the job", out, r"again: ending the job now")
        return None
    complete = job.wait_for(r"checkpoint: \S+checkpoint-000000 is complete: ", 120)
    completed = time.monotonic()
    rc, out = job.finish(4 * 40 + 60)
    ended = time.monotonic()
    print(f"== {name}: checkpoint complete {completed - stopped:.1f} s after Ctrl-C, the job ended "
          f"{ended - completed:.1f} s later, exit status {rc}")
    expect(f"{name}: the final checkpoint, then a clean end", out,
           r"checkpoint: writing .*checkpoint-000000 \(SIGTERM", r"SIGINT: the servers write their final checkpoint",
           r"perserve-launch: the job ended .* after the stop", code=0, rc=rc)
    if complete is None or ended - completed > STOP_BOUND:
        failures.append(f"{name}: the job did not end within {STOP_BOUND} s of its final checkpoint "
                        f"({ended - completed:.1f} s; mpirun's own kill sequence would take 80):\n{out}")
    if "ended by the launcher" in out:
        failures.append(f"{name}: the clients did not end by themselves:\n{out}")
    added = re.search(r"checkpoint: writing .*\(SIGTERM.* (\d+) ever added\)", out)
    if added is None:
        return None
    return checkpoints, added.group(1)


first = ctrl_c("Ctrl-C", twice=False)
if first is not None:
    checkpoints, added = first
    restore = launch(["read", "1", added], "--restore", checkpoints)
    rc, out = restore.finish(120)
    expect("Ctrl-C: its checkpoint restores", out, rf"learner: restored {added} items", code=0, rc=rc)
ctrl_c("Ctrl-C twice", twice=True)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("launch jobs: all passed")
