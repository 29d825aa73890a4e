"""Checkpoints under mpirun, end to end (issue 17): two server ranks write a
checkpoint a learner asks for; the job restarted with --restore holds every
item (and only those); a restore with another number of server ranks or
another capacity is refused naming both; SIGTERM to a server writes a
checkpoint, answers UNAVAILABLE and ends the job, and that checkpoint restores.

Usage: checkpoint_jobs.py MPIEXEC SERVER PYTHON CLIENT_SCRIPT WORK_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

mpiexec, server, python, client, work = sys.argv[1:6]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ckpt = os.path.join(work, "checkpoints")
flags = ["--column", "id:int64", "--min-size-to-sample", "100", "--stats-interval", "0"]
failures = []


def job(servers, actors, mode, *args, server_flags=(), capacity=4000, timeout=120):
    command = [mpiexec, "-np", str(servers), server, *flags, "--capacity", str(capacity), *server_flags, ":",
               "-np", str(actors + 1), python, "-m", "mpi4py", client, mode, str(servers), *map(str, args)]
    run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return run.returncode, run.stdout


def expect(name, output, *patterns, code=None, rc=0):
    problems = [f"no line matches {p!r}" for p in patterns if not re.search(p, output)]
    if code is not None and (rc == 0) != (code == 0):
        problems.append(f"exit status {rc}, expected {'0' if code == 0 else 'non-zero'}")
    print(f"== {name}: {'ok' if not problems else 'FAILED'}")
    if problems:
        print(output)
        failures.extend(f"{name}: {p}" for p in problems)


rc, out = job(2, 2, "write", server_flags=["--checkpoint-dir", ckpt])
expect("two shards write a checkpoint a learner asks for", out, r"learner: checkpoints .*shard-0-of-2.*shard-1-of-2",
       r"checkpoint: .*shard-1-of-2/checkpoint-000000 is complete", code=0, rc=rc)

rc, out = job(2, 2, "read", 6000, server_flags=["--restore", ckpt])
expect("restored with two shards", out, r"restored .*shard-0-of-2/checkpoint-000000: 3000 items",
       r"learner: restored 6000 items", code=0, rc=rc)

rc, out = job(1, 2, "read", 6000, server_flags=["--restore", ckpt], timeout=60)
expect("one shard cannot restore two", out, r"holds no checkpoint for shard 0 of 1 server ranks \(it has "
       r"shard-0-of-2, shard-1-of-2\)", code=1, rc=rc)

rc, out = job(2, 2, "read", 6000, server_flags=["--restore", ckpt], capacity=5000, timeout=60)
expect("another capacity is refused", out, r"capacity 4000; this server has schema id:int64: and capacity 5000",
       code=1, rc=rc)

# SIGTERM: a server that keeps serving until told, the clients until UNAVAILABLE.
term_dir = os.path.join(work, "term")
command = [mpiexec, "-np", "1", server, *flags, "--capacity", "4000", "--checkpoint-dir", term_dir, ":",
           "-np", "2", python, "-m", "mpi4py", client, "term", "1"]
process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
time.sleep(4)  # joined, adding and sampling
# The server's own process only (mpirun's command line names it too).
pids = subprocess.run(["pgrep", "-f", f"^{server} .*{term_dir}"], stdout=subprocess.PIPE, text=True).stdout
for pid in pids.split():
    os.kill(int(pid), signal.SIGTERM)
try:
    out, _ = process.communicate(timeout=60)
    rc = process.returncode
except subprocess.TimeoutExpired:
    process.kill()
    out, rc = process.communicate()[0] + "\n(the job did not end within 60 s of SIGTERM)", 1
expect("SIGTERM writes a checkpoint and ends the job", out, r"checkpoint: writing .*\(SIGTERM",
       r"checkpoint: .*term/shard-0-of-1/checkpoint-000000 is complete",
       r"SIGTERM: no longer serving", r"actor 0: .*the server has stopped serving \(SIGTERM\); its last checkpoint",
       r"learner: .*the server has stopped serving", code=0, rc=rc)
added = re.search(r"checkpoint: writing .*\(SIGTERM.* (\d+) ever added\)", out)
if added:
    rc, out = job(1, 1, "read", int(added.group(1)), server_flags=["--restore", term_dir])
    expect("the SIGTERM checkpoint restores", out, rf"learner: restored {added.group(1)} items", code=0, rc=rc)
else:
    failures.append("SIGTERM job: no final line with the items added")

# A crash while a checkpoint is written: the server is killed (SIGKILL) just
# after its second checkpoint begins (a 400 MB store: its fsync alone takes
# about a second here, and the rename waits for it); the first restores.
crash_dir = os.path.join(work, "crash")
big = ["--column", "id:int64", "--column", "obs:uint8:100000", "--capacity", "4000", "--min-size-to-sample", "100",
       "--stats-interval", "0", "--checkpoint-dir", crash_dir]
command = [mpiexec, "-np", "1", server, *big, ":", "-np", "2", python, "-m", "mpi4py", client, "term", "1"]
process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
server_pid = None
lines = []


def wait_for(pattern, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            return None
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    return None


if wait_for(r"serving 2 clients", 60):
    time.sleep(3)  # the store fills
    found = subprocess.run(["pgrep", "-f", f"^{server} .*{crash_dir}"], stdout=subprocess.PIPE, text=True).stdout
    server_pid = int(found.split()[0]) if found.split() else None
first = None
if server_pid:
    os.kill(server_pid, signal.SIGUSR1)
    first = wait_for(r"checkpoint: writing .*checkpoint-000000 .* (\d+) ever added\)", 30)
    complete = wait_for(r"checkpoint-000000 is complete", 60)
    os.kill(server_pid, signal.SIGUSR1)
    second = wait_for(r"checkpoint: writing .*checkpoint-000001", 30)
    os.kill(server_pid, signal.SIGKILL)  # mid-write
    if not (first and complete and second):
        failures.append("crash job: the checkpoints did not begin and end as expected:\n" + "".join(lines))
process.kill()
process.communicate()
left = sorted(os.listdir(os.path.join(crash_dir, "shard-0-of-1"))) if os.path.isdir(crash_dir) else []
print(f"== after the kill: {left}")
if left != ["checkpoint-000000", "checkpoint-000001.partial"]:
    failures.append(f"crash job: expected the first checkpoint and the second one's .partial, found {left}")
if first:
    rc, out = job(1, 1, "read", int(first.group(1)),
                  server_flags=["--restore", crash_dir, "--column", "obs:uint8:100000"], capacity=4000)
    expect("after a crash mid-write the previous checkpoint restores", out,
           r"restored .*crash/shard-0-of-1/checkpoint-000000: ", rf"learner: restored {first.group(1)} items",
           code=0, rc=rc)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("checkpoint jobs: all passed")
