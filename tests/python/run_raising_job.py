"""Runs raising_rank.py under mpirun beside a server and checks that the job
ends (within the timeout, not zero) because of the Python exception: an actor
raising under `python3 -m mpi4py`, and a learner raising under plain `python3`
while the actor adds for ever (the perserve package's excepthook aborts it).
Usage: run_raising_job.py <mpiexec> <perserve-server> <python>"""
import os
import signal
import subprocess
import sys
import time

mpiexec, server, python = sys.argv[1:4]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raising_rank.py")
for launch, raising in (([python, "-m", "mpi4py"], "actor"), ([python], "learner")):
    how = f"{' '.join(os.path.basename(word) for word in launch)}, the {raising} raising"
    start = time.monotonic()
    # A session of its own: a job past its time is killed whole (mpiexec and
    # every rank, none left behind), and what it wrote so far is printed, so
    # a hang says which rank waited for what.
    with subprocess.Popen([mpiexec, "-np", "1", server, "--stats-interval", "0", ":",
                           "-np", "2", *launch, script, raising],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as job:
        try:
            output, _ = job.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            output, _ = job.communicate()
            print(output)
            sys.exit(f"FAIL ({how}): the job did not end within 45 s after its Python rank raised")
    print(output)
    assert job.returncode != 0, f"{how}: the job exited 0"
    assert f"RuntimeError: deliberate failure on the {raising} rank" in output, \
        f"{how}: the exception is not in the output"
    print(f"OK ({how}): the job ended with exit code {job.returncode} {time.monotonic() - start:.1f} s after it started")
