"""Checkpoints under mpirun, end to end (issue 17): two server ranks write a
checkpoint a learner asks for; the job restarted with --restore holds every
item (and only those); a restore with another number of server ranks or
another capacity is refused naming both; SIGTERM to a server writes a
checkpoint holding exactly the items the actors were acknowledged (issue 26),
answers UNAVAILABLE and ends the job, and that checkpoint restores.

Usage: checkpoint_jobs.py MPIEXEC SERVER PYTHON CLIENT_SCRIPT WORK_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from job_driver import Job, expect, failures

mpiexec, server, python, client, work = sys.argv[1:6]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ckpt = os.path.join(work, "checkpoints")
flags = ["--column", "id:int64", "--min-size-to-sample", "100", "--stats-interval", "0"]


def job(servers, actors, mode, *args, server_flags=(), capacity=4000, timeout=120):
    command = [mpiexec, "-np", str(servers), server, *flags, "--capacity", str(capacity), *server_flags, ":",
               "-np", str(actors + 1), python, "-m", "mpi4py", client, mode, str(servers), *map(str, args)]
    run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return run.returncode, run.stdout


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
expect("another capacity is refused", out, r"written with --capacity 4000; this server has --capacity 5000",
       code=1, rc=rc)

# SIGTERM: a server that keeps serving until told, the clients (two actors, as in
# issue 26) until UNAVAILABLE.
term_dir = os.path.join(work, "term")
term = Job([mpiexec, "-np", "1", server, *flags, "--capacity", "4000", "--checkpoint-dir", term_dir, ":",
            "-np", "3", python, "-m", "mpi4py", client, "term", "1"])
if term.wait_for(r"serving 3 clients", 120):
    time.sleep(1)  # adding and sampling
    pid = term.server_pid(server, term_dir)
    if pid:
        os.kill(pid, signal.SIGTERM)
rc, out = term.finish(120)
expect("SIGTERM writes a checkpoint and ends the job", out, r"checkpoint: writing .*\(SIGTERM",
       r"checkpoint: .*term/shard-0-of-1/checkpoint-000000 is complete",
       r"SIGTERM: no longer serving",
       # Its requests after SIGTERM are answered once the final checkpoint is
       # complete (the server pauses MPI until then), or, if held, when it began.
       r"actor 0: .*the server has stopped serving \(SIGTERM\); its (last checkpoint: |final checkpoint, holding "
       r"everything acknowledged before this, is being written to ).*checkpoint-000000",
       r"learner: .*the server has stopped serving", code=0, rc=rc)
added = re.search(r"checkpoint: writing .*\(SIGTERM.* (\d+) ever added\)", out)
acknowledged = sum(int(n) for n in re.findall(r"actor \d+: (\d+) items acknowledged", out))
print(f"== SIGTERM: the actors' acknowledged items {acknowledged}, the checkpoint's "
      f"{added.group(1) if added else None}")
if added and int(added.group(1)) != acknowledged:  # nothing acknowledged is lost, nothing unacknowledged kept
    failures.append(f"SIGTERM job: the actors were acknowledged {acknowledged} items, its checkpoint holds "
                    f"{added.group(1)}:\n{out}")
if added:
    rc, out = job(1, 2, "read", int(added.group(1)), server_flags=["--restore", term_dir])
    expect("the SIGTERM checkpoint restores", out, rf"learner: restored {added.group(1)} items", code=0, rc=rc)
else:
    failures.append("SIGTERM job: no final line with the items added")

# A crash while a checkpoint is written: the server is killed (SIGKILL) just
# after its second checkpoint begins (a 400 MB store: its fsync alone takes
# about a second here, and the rename waits for it); the first restores.
crash_dir = os.path.join(work, "crash")
big = ["--column", "id:int64", "--column", "obs:uint8:100000", "--capacity", "4000", "--min-size-to-sample", "100",
       "--stats-interval", "0", "--checkpoint-dir", crash_dir]
crash = Job([mpiexec, "-np", "1", server, *big, ":", "-np", "2", python, "-m", "mpi4py", client, "term", "1"])
first = None
if crash.wait_for(r"serving 2 clients", 120):
    time.sleep(3)  # the store fills
    pid = crash.server_pid(server, crash_dir)
    if pid:
        os.kill(pid, signal.SIGUSR1)
        first = crash.wait_for(r"checkpoint: writing .*checkpoint-000000 .* (\d+) ever added\)", 60)
        complete = crash.wait_for(r"checkpoint-000000 is complete", 120)
        os.kill(pid, signal.SIGUSR1)
        second = crash.wait_for(r"checkpoint: writing .*checkpoint-000001", 60)
        os.kill(pid, signal.SIGKILL)  # mid-write
        if not (first and complete and second):
            failures.append("crash job: the checkpoints did not begin and end as expected:\n" + "".join(crash.lines))
crash.process.kill()
crash.finish(60)
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
