"""Runs raising_rank.py under mpirun beside a server and checks that the job
ends (within the timeout, not zero) because of the Python exception.
Usage: run_raising_job.py <mpiexec> <perserve-server> <python>"""
import os
import subprocess
import sys
import time

mpiexec, server, python = sys.argv[1:4]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raising_rank.py")
start = time.monotonic()
try:
    run = subprocess.run([mpiexec, "-np", "1", server, "--stats-interval", "0", ":",
                          "-np", "2", python, "-m", "mpi4py", script],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
except subprocess.TimeoutExpired:
    sys.exit("FAIL: the job did not end within 60 s after its Python rank raised")
print(run.stdout)
assert run.returncode != 0, "the job exited 0"
assert "RuntimeError: deliberate failure on the actor rank" in run.stdout, "the exception is not in the output"
print(f"OK: the job ended with exit code {run.returncode} {time.monotonic() - start:.1f} s after it started")
