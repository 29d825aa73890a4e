"""Runs raising_rank.py under mpirun beside a server and checks that the job
ends (within the timeout, not zero) because of the Python exception: an actor
raising under `python3 -m mpi4py`, and a learner raising under plain `python3`
while the actor adds for ever (the perserve package's excepthook aborts it).
Usage: run_raising_job.py <mpiexec> <perserve-server> <python>"""
import os
import subprocess
import sys
import time

mpiexec, server, python = sys.argv[1:4]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raising_rank.py")
for launch, raising in (([python, "-m", "mpi4py"], "actor"), ([python], "learner")):
    how = f"{' '.join(os.path.basename(word) for word in launch)}, the {raising} raising"
    start = time.monotonic()
    try:
        run = subprocess.run([mpiexec, "-np", "1", server, "--stats-interval", "0", ":",
                              "-np", "2", *launch, script, raising],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=45)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL ({how}): the job did not end within 45 s after its Python rank raised")
    print(run.stdout)
    assert run.returncode != 0, f"{how}: the job exited 0"
    assert f"RuntimeError: deliberate failure on the {raising} rank" in run.stdout, \
        f"{how}: the exception is not in the output"
    print(f"OK ({how}): the job ended with exit code {run.returncode} {time.monotonic() - start:.1f} s after it started")
