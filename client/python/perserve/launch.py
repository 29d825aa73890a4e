"""perserve-launch: one line starts a perserve job under mpirun or srun.

    perserve-launch -n 1 perserve-server --capacity 1000000 --checkpoint-dir ckpt : \\
                    -n 4 actor.py : -n 1 learner.py

Options come before the first ``-n``; the programs are mpirun's MPMD
contexts (``-n N PROGRAM ARGS :``), with ``perserve-server`` found where pip
or the build put it and a ``*.py`` file run as ``python3 -m mpi4py FILE``.
The settings users would otherwise need to know (launch_plan.py: the
SIGKILL grace sized from the final checkpoint, oversubscription only when
the ranks outnumber the cores, the root flag only as root, TCP between
nodes) are set for them, and said in one line at the start.

Ctrl-C (or SIGTERM, SIGHUP) once: SIGUSR2 to mpirun or srun, which forward
it to every rank at once; the servers take it as SIGTERM (their final
checkpoint, then UNAVAILABLE to every request) and every other rank
ignores it, so the clients end by themselves when the server answers
UNAVAILABLE, and the job ends a moment after the final checkpoint is
complete: no rank dies, so Open MPI's kill sequence (the grace, twice)
never starts. A job whose ranks are still running ``--stop-wait`` seconds
after every server's final checkpoint is complete is ended by the
launcher. Ctrl-C twice: the job is ended at once, without waiting for the
checkpoint (docs/launch.md).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from .launch_plan import (DEFAULT_DISK_GBPS, MULTI_PROG_PLACEHOLDER, LaunchError, Plan, build_plan,
                          split_contexts, this_machine)

NAME = "perserve-launch"
CONTEXT_START = ("-n", "-np", "--np")


def say(message: str) -> None:
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The launcher's options, and the programs from the first -n on."""
    starts = [i for i, word in enumerate(argv) if word in CONTEXT_START]
    options, programs = (argv[:starts[0]], argv[starts[0]:]) if starts else (argv, [])
    parser = argparse.ArgumentParser(
        prog=NAME, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{NAME} [options] -n N perserve-server [flags] : -n N PROGRAM [args] [: ...]",
        description=__doc__.split("\n\n")[0] + "\n\nSee docs/launch.md for what it sets and why.")
    parser.add_argument("--launcher", choices=("auto", "mpirun", "srun"), default="auto",
                        help="auto: srun inside a Slurm allocation, else mpirun")
    parser.add_argument("--transport", choices=("auto", "shm", "tcp", "default"), default="auto",
                        help="auto: shared memory on one node, TCP between nodes; tcp: every rank over TCP; "
                             "default: Open MPI's own choice (e.g. UCX on InfiniBand)")
    parser.add_argument("--host", help="mpirun's --host list (h1,h2:4)")
    parser.add_argument("--hostfile", help="mpirun's --hostfile")
    parser.add_argument("--checkpoint-seconds", type=float,
                        help="how long a server's final checkpoint takes (its log's 'is complete: ... in X s'); "
                             f"default: its size from the server's flags at --disk-gbps")
    parser.add_argument("--disk-gbps", type=float, default=DEFAULT_DISK_GBPS,
                        help="write rate for the checkpoint estimate (default %(default)s GB/s)")
    parser.add_argument("--stop-wait", type=float, default=5.0,
                        help="seconds the ranks have to end after every final checkpoint is complete, before "
                             "the launcher ends the job (default %(default)s)")
    parser.add_argument("--mpi-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for mpirun or srun (repeat it)")
    parser.add_argument("--dry-run", action="store_true", help="print the command and settings; run nothing")
    args = parser.parse_args(options)
    if not programs:
        parser.error("no programs: -n N perserve-server ... : -n N PROGRAM ...")
    return args, programs


class ServerWatch:
    """Follows the servers' log lines after the stop: each server rank is
    done once its final checkpoint is complete, or could not be written,
    or it stopped without one (no --checkpoint-dir)."""

    RANK = re.compile(r"\[rank (\d+) server\]")
    WRITING = re.compile(r"checkpoint: writing (\S+) \(SIGTERM")
    COMPLETE = re.compile(r"checkpoint: (\S+) is complete")

    def __init__(self, servers: int) -> None:
        self.servers = servers
        self.reacted: set[str] = set()     # ranks that took the stop
        self.finals: dict[str, str] = {}   # rank -> path of its final checkpoint
        self.done: dict[str, str] = {}     # rank -> what it ended with
        self.lock = threading.Lock()

    def feed(self, line: str) -> None:
        rank = self.RANK.search(line)
        if rank is None:
            return
        rank = rank.group(1)
        with self.lock:
            if "SIGTERM" in line:
                self.reacted.add(rank)
            if (match := self.WRITING.search(line)) is not None:
                self.finals[rank] = match.group(1)
            elif (match := self.COMPLETE.search(line)) is not None and self.finals.get(rank) == match.group(1):
                self.done[rank] = f"{match.group(1)} complete"
            elif "checkpoint: not written" in line and rank in self.finals:
                self.done[rank] = "its final checkpoint failed"
            elif "SIGTERM: no longer serving" in line and "after its final checkpoint" not in line:
                self.done.setdefault(rank, "no checkpoint")

    def all_reacted(self) -> bool:
        with self.lock:
            return len(self.reacted) >= self.servers

    def all_done(self) -> bool:
        with self.lock:
            return len(self.done) >= self.servers

    def summary(self) -> str:
        with self.lock:
            return "; ".join(f"rank {r}: {what}" for r, what in sorted(self.done.items()))


class Supervisor:
    """Runs the job's launcher process and ends the job when asked (see the module's docstring)."""

    def __init__(self, plan: Plan, stop_wait: float) -> None:
        self.plan = plan
        self.stop_wait = stop_wait
        self.watch = ServerWatch(plan.servers)
        self.stops = 0
        self.stopped_at: Optional[float] = None
        self.signalled_at = 0.0
        self.done_at: Optional[float] = None
        self.forced: Optional[str] = None
        self.forced_code = 0  # 128 + the signal for a user's second one, 1 when the launcher gave up waiting
        self.process: Optional[subprocess.Popen] = None

    def run(self, argv: list[str]) -> int:
        # Its own session: the terminal's Ctrl-C reaches this process only,
        # which decides what mpirun gets. No stdin: a background process
        # group that read the terminal would be stopped.
        # Outside this process group, mpirun would outlive a launcher killed
        # outright (SIGKILL, `timeout -k`): it gets SIGTERM then, Open MPI's
        # own end of a job (the grace set here for the checkpoint).
        self.process = subprocess.Popen(argv, env={**os.environ, **self.plan.env}, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                        preexec_fn=_terminate_with_parent)
        pumps = [threading.Thread(target=self.pump, args=(pipe, out), daemon=True)
                 for pipe, out in ((self.process.stdout, sys.stdout), (self.process.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        while True:
            try:
                code = self.process.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                self.check_deadlines()
        for pump in pumps:
            pump.join(timeout=2.0)
        return self.finish(code)

    def pump(self, pipe, out) -> None:
        for line in iter(pipe.readline, b""):
            out.buffer.write(line)
            out.flush()
            if self.stopped_at is not None:
                self.watch.feed(line.decode(errors="replace"))

    def on_signal(self, number: int, frame) -> None:
        self.stops += 1
        if self.stops == 1:
            self.stopped_at = self.signalled_at = time.monotonic()
            expected = (f"expected in about {self.plan.checkpoint_seconds:.0f} s"
                        if self.plan.checkpoint_bytes else "no --checkpoint-dir: none is written")
            say(f"{signal.Signals(number).name}: the servers write their final checkpoint ({expected}), then the "
                "job ends; Ctrl-C again ends it at once, without it")
            self.process.send_signal(signal.SIGUSR2)
        else:
            self.force(f"{signal.Signals(number).name} again", code=128 + number)

    def check_deadlines(self) -> None:
        if self.stopped_at is None or self.forced:
            return
        now = time.monotonic()
        # A stop that came before the ranks started (or while mpirun still
        # launched them) reached no server: it goes again every 2 s until each
        # has taken it (a second one changes nothing, and clients ignore it).
        if not self.watch.all_reacted() and now - self.signalled_at > 2.0:
            self.signalled_at = now
            self.process.send_signal(signal.SIGUSR2)
        if self.done_at is None and self.watch.all_done():
            self.done_at = now
            say(f"servers done {now - self.stopped_at:.1f} s after the stop: {self.watch.summary()}; "
                "waiting for the ranks to end")
        if self.done_at is not None and now - self.done_at > self.stop_wait:
            self.force(f"ranks still running {self.stop_wait:.0f} s after the final checkpoints (clients end when "
                       "the server answers UNAVAILABLE: docs/launch.md)", code=1)
        elif self.done_at is None and now - self.stopped_at > 2 * self.plan.grace_seconds + 30:
            self.force(f"no server finished its final checkpoint in {now - self.stopped_at:.0f} s", code=1)

    def force(self, why: str, code: int) -> None:
        """Ends the job now: under mpirun every process of its session (the
        local ranks; remote ones end with their lost daemon), under srun
        three SIGINTs (srun's own 'end the step now')."""
        if self.forced:
            return
        self.forced, self.forced_code = why, code
        say(f"{why}: ending the job now")
        if self.plan.launcher == "srun":
            for _ in range(3):
                self.process.send_signal(signal.SIGINT)
                time.sleep(0.3)
            return
        for pid in session_members(self.process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def finish(self, code: int) -> int:
        if self.stopped_at is None:
            return code if code >= 0 else 128 - code
        after = time.monotonic() - self.stopped_at
        since_done = f", {time.monotonic() - self.done_at:.1f} s after the final checkpoints" if self.done_at else ""
        say(f"the job ended {after:.1f} s after the stop{since_done}, exit status {code}"
            f"{' (ended by the launcher)' if self.forced else ''}")
        if self.forced:
            return self.forced_code
        return code if code >= 0 else 128 - code  # mpirun killed by a signal: as a shell says it


def _terminate_with_parent() -> None:
    """In the child before exec: SIGTERM when the launcher dies (Linux's PR_SET_PDEATHSIG)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def session_members(session: int) -> list[int]:
    """Every process of a session, its leader first (from /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # after the name: state, ppid, pgrp, session
            members.append(int(entry))
    return sorted(members, key=lambda pid: pid != session)


def main(argv: Optional[list[str]] = None) -> int:
    args, programs = parse(sys.argv[1:] if argv is None else argv)
    launcher = args.launcher
    if launcher == "auto":
        launcher = "srun" if "SLURM_JOB_ID" in os.environ and shutil.which("srun") else "mpirun"
    try:
        plan = build_plan(split_contexts(programs), this_machine(), launcher=launcher, transport=args.transport,
                          hosts=args.host, hostfile=args.hostfile, checkpoint_seconds=args.checkpoint_seconds,
                          disk_gbps=args.disk_gbps, extra=args.mpi_arg)
    except LaunchError as error:
        say(str(error))
        return 2
    if plan.checkpoint_bytes:
        checkpoint = (f"final checkpoint ~{plan.checkpoint_bytes / 1e9:.2f} GB a server, ~{plan.checkpoint_seconds:.0f} s; "
                      f"SIGKILL grace {plan.grace_seconds} s. Ctrl-C: the final checkpoint, then the job ends")
    else:
        checkpoint = (f"no --checkpoint-dir; SIGKILL grace {plan.grace_seconds} s. Ctrl-C: the servers stop, then "
                      "the job ends")
    say(f"{plan.launcher}, {plan.ranks} ranks ({plan.servers} server); {'; '.join(plan.notes)}; {checkpoint}; "
        "twice: at once")
    if args.dry_run:
        print(" ".join(f"{k}={v}" for k, v in sorted(plan.env.items())), " ".join(plan.argv))
        if plan.multi_prog:
            print(plan.multi_prog, end="")
        return 0
    argv = plan.argv
    if plan.multi_prog is not None:
        with tempfile.NamedTemporaryFile("w", prefix="perserve-launch-", suffix=".conf", delete=False) as conf:
            conf.write(plan.multi_prog)
        argv = [conf.name if word == MULTI_PROG_PLACEHOLDER else word for word in argv]
    try:
        return Supervisor(plan, args.stop_wait).run(argv)
    finally:
        if plan.multi_prog is not None:
            os.unlink(conf.name)


if __name__ == "__main__":
    sys.exit(main())
