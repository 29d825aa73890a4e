"""Runs unclosed_rejected.py in each mode under mpirun beside a server and
checks that no rejection is lost at exit: the line naming the rank and the
server's reason is on stderr, and the job fails (the rank exits 1); a clean
run exits 0 with no such line.
Usage: run_unclosed_jobs.py <mpiexec> <perserve-server> <python>"""
import os
import subprocess
import sys

mpiexec, server, python = sys.argv[1:4]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unclosed_rejected.py")

# mode -> what the client's rank (1) must print; None: nothing, and status 0.
EXPECTED = {
    "dropped": "perserve: rank 1: the actor's close by its destructor (close() was never called) failed: "
               "INVALID_ARGUMENT: an earlier batch was rejected: server: an add of 2000 items",
    "exit": "perserve: rank 1: the actor's close at interpreter exit failed: "
            "INVALID_ARGUMENT: an earlier batch was rejected: server: priority 0 at position 0",
    "finalize": "perserve: rank 1: the actor's close at MPI_Finalize failed: "
                "INVALID_ARGUMENT: an earlier batch was rejected: server: priority 0 at position 0",
    "learner": "perserve: rank 1: the learner's close at interpreter exit failed: "
               "NOT_FOUND: an earlier priority update was rejected: server: ",
    "clean": None,
}

failures = []
for mode, line in EXPECTED.items():
    try:
        run = subprocess.run([mpiexec, "-np", "1", server, "--column", "id:int64", "--capacity", "1000",
                              # eps 0: a zero priority is refused (the default 1e-6 accepts it)
                              "--priority-eps", "0", "--stats-interval", "0", ":", "-np", "1", python, "-m", "mpi4py", script, mode],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        failures.append(f"{mode}: the job did not end within 60 s")
        continue
    said = run.stdout
    if line is None:
        ok = run.returncode == 0 and "failed:" not in said
        what = "exit status 0 and no failed close"
    else:
        ok = run.returncode != 0 and line in said
        what = f"a non-zero exit status and {line!r}"
    print(f"{mode}: exit status {run.returncode}: {'OK' if ok else 'FAIL'}")
    if not ok:
        failures.append(f"{mode}: expected {what}; exit status {run.returncode}, output:\n{said}")
if failures:
    sys.exit("FAIL\n" + "\n".join(failures))
print("OK: every rejection left at exit was printed with its rank and failed the job")
