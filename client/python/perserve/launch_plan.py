"""What perserve-launch runs: the command line and the settings of one job.

Pure functions over the launcher's arguments and what this machine says
(cores, user, whether cross-memory attach works), so the rules are tested
without starting anything (tests/python/test_launch_plan.py):

- the SIGKILL grace (Open MPI's ``odls_base_sigkill_timeout``: its wait
  between SIGTERM and SIGKILL, and before the SIGTERM) sized from the final
  checkpoint each server rank will write, estimated from its flags;
- oversubscription only when the ranks outnumber the cores (or slots);
- the root flag only as root;
- TCP between nodes (shared memory within one);
- every rank but the servers started with SIGUSR2 ignored, the signal the
  launcher stops a job with (the servers take it as SIGTERM);
- a ``*.py`` program run as ``<this python> -m mpi4py FILE``, so an uncaught
  exception ends the job.
"""
from __future__ import annotations

import ctypes
import math
import os
import shlex
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Optional

SERVER = "perserve-server"
STOP_SIGNAL_NAME = "USR2"
MULTI_PROG_PLACEHOLDER = "{multi-prog file}"
# A client rank: SIGUSR2 ignored, then the program (exec keeps SIG_IGN).
IGNORE_STOP = ["/bin/sh", "-c", f'trap "" {STOP_SIGNAL_NAME}; exec "$@"', "perserve-rank"]

# The server's defaults (perserve-server --help) that the estimate needs.
DEFAULT_CAPACITY = 1 << 21
DEFAULT_ITEM_BYTES = 45  # Schema::Default(): obs float32[4], action int64, reward float32, next_obs float32[4], done uint8
DTYPE_BYTES = {"uint8": 1, "int32": 4, "int64": 8, "float32": 4, "float64": 8}
# What a checkpoint holds beside the columns, per item: its leaf and key;
# per step of a step stream: its stream, index and episode start.
ITEM_OVERHEAD_BYTES = 16
STEP_OVERHEAD_BYTES = 24
# A conservative write rate for the estimate: half of what `dd` with fsync
# wrote on the development machine (0.40 GB/s; a checkpoint went at 0.6).
DEFAULT_DISK_GBPS = 0.2


class LaunchError(Exception):
    """A launcher argument or setting that cannot work; the message says what to do."""


@dataclass
class AppContext:
    """One `-n N PROGRAM ARGS...` of the command line."""
    ranks: int
    program: str
    args: list[str]

    @property
    def is_server(self) -> bool:
        return os.path.basename(self.program) == SERVER


@dataclass
class Machine:
    """What the plan depends on besides the arguments (tests pass their own)."""
    cores: int
    root: bool
    cma_works: bool
    environ: dict[str, str]


@dataclass
class Plan:
    argv: list[str]
    env: dict[str, str]           # the settings the launcher adds (the rest is inherited)
    launcher: str                 # "mpirun" or "srun"
    servers: int
    ranks: int
    checkpoint_bytes: int         # the largest server's final checkpoint (estimate); 0 without --checkpoint-dir
    checkpoint_seconds: float
    grace_seconds: int
    notes: list[str] = field(default_factory=list)
    multi_prog: Optional[str] = None  # srun: the --multi-prog file's text


def split_contexts(words: list[str]) -> list[AppContext]:
    """`-n 1 prog a b : -n 2 prog2` into contexts; -np and --np are -n too."""
    contexts, current = [], []
    for word in words + [":"]:
        if word != ":":
            current.append(word)
            continue
        if not current:
            raise LaunchError("an empty program between ':' separators")
        if current[0] not in ("-n", "-np", "--np") or len(current) < 3:
            raise LaunchError(f"each program starts with -n N: got {shlex.join(current)!r}")
        try:
            ranks = int(current[1])
        except ValueError:
            raise LaunchError(f"-n takes a number of ranks, got {current[1]!r}") from None
        if ranks < 1:
            raise LaunchError(f"-n must be at least 1, got {ranks}")
        contexts.append(AppContext(ranks, current[2], current[3:]))
        current = []
    if not any(c.is_server for c in contexts):
        raise LaunchError(f"no {SERVER} among the programs: one -n N {SERVER} ... is the replay")
    if all(c.is_server for c in contexts):
        raise LaunchError(f"only {SERVER} among the programs: add the actors and learners")
    return contexts


def flag_values(args: list[str], name: str) -> list[str]:
    """Every value of `--name V` or `--name=V` in args."""
    values = []
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(name + "="):
            values.append(arg[len(name) + 1:])
    return values


def column_bytes(spec: str) -> int:
    """Bytes an item of "name:dtype:d0,d1" holds (the form perserve-server reads)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[1] not in DTYPE_BYTES:
        raise LaunchError(f"column {spec!r}: expected name:dtype[:shape], dtype one of {', '.join(DTYPE_BYTES)}")
    shape = [int(d) for d in parts[2].split(",") if d] if len(parts) == 3 else []
    return DTYPE_BYTES[parts[1]] * math.prod(shape)


def checkpoint_bytes(server_args: list[str]) -> int:
    """About what a full replay's checkpoint of one server rank holds; 0
    when the server takes none (no --checkpoint-dir). The columns, the
    leaves and keys and, of step streams, each step's stream fields; the
    small state is left out."""
    if not flag_values(server_args, "--checkpoint-dir"):
        return 0
    capacity = int((flag_values(server_args, "--capacity") or [DEFAULT_CAPACITY])[-1])
    columns = flag_values(server_args, "--column")
    row = sum(column_bytes(c) for c in columns) if columns else DEFAULT_ITEM_BYTES
    steps = any(int(v) > 0 for v in flag_values(server_args, "--n-step") + flag_values(server_args,
                                                                                        "--sequence-length"))
    if steps:
        items = sum(column_bytes(c) for c in flag_values(server_args, "--item-column"))
        return capacity * (row + STEP_OVERHEAD_BYTES + items + ITEM_OVERHEAD_BYTES)
    return capacity * (row + ITEM_OVERHEAD_BYTES)


def grace_for(checkpoint_seconds: float) -> int:
    """The SIGKILL grace for a checkpoint expected to take this long: half as
    long again and 10 s more."""
    return math.ceil(1.5 * checkpoint_seconds) + 10


def physical_cores() -> int:
    """The cores this process may run on, counted as Open MPI counts slots
    (cores, not hardware threads)."""
    cpus = os.sched_getaffinity(0)
    cores = set()
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{base}/physical_package_id") as package, open(f"{base}/core_id") as core:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


def cross_memory_attach_works() -> bool:
    """Whether process_vm_readv works here (a container without
    CAP_SYS_PTRACE refuses it): Open MPI's shared memory then needs
    btl_vader_single_copy_mechanism=none, or large messages fail."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        readv = libc.process_vm_readv
    except (OSError, AttributeError):
        return False

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]

    source, target = ctypes.create_string_buffer(b"perserve", 8), ctypes.create_string_buffer(8)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # holds still until the parent has read its memory
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    local = IoVec(ctypes.cast(target, ctypes.c_void_p), 8)
    remote = IoVec(ctypes.cast(source, ctypes.c_void_p), 8)
    read = readv(child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    os.write(write_end, b"x")
    os.close(write_end)
    os.waitpid(child, 0)
    return read == 8 and target.raw == b"perserve"


def this_machine() -> Machine:
    return Machine(cores=physical_cores(), root=os.geteuid() == 0, cma_works=cross_memory_attach_works(),
                   environ=dict(os.environ))


def find_server() -> str:
    """perserve-server: on PATH, beside this Python (a venv's bin, not on
    PATH when it is not activated), or in the build tree this package was
    assembled in (<build>/python/perserve -> <build>/server)."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [shutil.which(SERVER), os.path.join(sysconfig.get_path("scripts"), SERVER),
                  os.path.join(os.path.dirname(sys.executable), SERVER),
                  os.path.join(here, "..", "..", "server", SERVER)]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    raise LaunchError(f"{SERVER} not found on PATH, in {sysconfig.get_path('scripts')} or in a build tree: "
                      "pip install . (or scripts/build.sh) first, or give its path")


def command_of(context: AppContext) -> list[str]:
    """The words that start one rank of a context."""
    if context.is_server and os.sep not in context.program:
        return [find_server(), *context.args]
    if context.program.endswith(".py"):
        if not os.path.isfile(context.program):
            raise LaunchError(f"{context.program}: no such file")
        return [sys.executable, "-m", "mpi4py", context.program, *context.args]
    if os.sep not in context.program and shutil.which(context.program) is None:
        raise LaunchError(f"{context.program}: not found on PATH")
    return [context.program, *context.args]


def hosts_and_slots(hosts: Optional[str], hostfile: Optional[str]) -> tuple[int, Optional[int]]:
    """Distinct hosts and their slots (None where Open MPI finds them itself)
    of mpirun's --host list (h1,h2:4) or --hostfile (h slots=N)."""
    names, slots, known = set(), 0, True
    entries = []
    if hosts:
        entries += [(h.split(":")[0], h.split(":")[1] if ":" in h else "1") for h in hosts.split(",") if h]
    if hostfile:
        try:
            with open(hostfile) as f:
                for line in f:
                    words = line.split("#")[0].split()
                    if words:
                        given = [w.split("=")[1] for w in words[1:] if w.startswith(("slots=", "max_slots="))]
                        entries.append((words[0], given[0] if given else None))
        except OSError as error:
            raise LaunchError(f"--hostfile {hostfile}: {error.strerror}") from None
    for name, count in entries:
        names.add(name)
        if count is None:
            known = False
        else:
            slots += int(count)
    return len(names), (slots if known else None)


def slurm_cpus(environ: dict[str, str]) -> tuple[int, Optional[int]]:
    """Nodes and CPUs of the Slurm allocation ("72(x2),36" -> 180)."""
    nodes = int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or 1)
    cpus = 0
    for part in filter(None, environ.get("SLURM_JOB_CPUS_PER_NODE", "").split(",")):
        count, _, repeat = part.partition("(x")
        cpus += int(count) * int(repeat.rstrip(")") or 1)
    return nodes, (cpus or None)


def mca_settings(transport: str, nodes: int, environ: dict[str, str]) -> tuple[list[str], str]:
    """Open MPI's transport flags for the job, and how to say it."""
    if "OMPI_MCA_btl" in environ or transport == "default":
        return [], f"transports {environ.get('OMPI_MCA_btl', 'as Open MPI chooses')}"
    if transport == "tcp":
        return ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"], "every rank over TCP"
    if transport == "shm" or nodes <= 1:
        return [], "shared memory"
    return ["--mca", "pml", "ob1", "--mca", "btl", "tcp,vader,self"], f"TCP between {nodes} nodes"


def build_plan(contexts: list[AppContext], machine: Machine, *, launcher: str = "mpirun",
               transport: str = "auto", hosts: Optional[str] = None, hostfile: Optional[str] = None,
               checkpoint_seconds: Optional[float] = None, disk_gbps: float = DEFAULT_DISK_GBPS,
               extra: Optional[list[str]] = None) -> Plan:
    """The job's command line and settings (see the module's docstring)."""
    environ = machine.environ
    largest = max(checkpoint_bytes(c.args) for c in contexts if c.is_server)
    if checkpoint_seconds is None:
        checkpoint_seconds = largest / (disk_gbps * 1e9) if largest else 0.0
    plan = Plan([], {}, launcher, servers=sum(c.ranks for c in contexts if c.is_server),
                ranks=sum(c.ranks for c in contexts), checkpoint_bytes=largest,
                checkpoint_seconds=checkpoint_seconds, grace_seconds=grace_for(checkpoint_seconds))
    settings = {"OMP_WAIT_POLICY": "passive", "OMPI_MCA_btl_vader_eager_limit": "16384"}
    if not machine.cma_works:
        settings["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
        plan.notes.append("no cross-memory attach here (a container?): shared memory copies twice")
    commands = [command_of(c) if c.is_server else IGNORE_STOP + command_of(c) for c in contexts]
    if launcher == "srun":
        _srun(plan, contexts, commands, settings, transport, environ)
    else:
        _mpirun(plan, contexts, commands, settings, machine, transport, hosts, hostfile)
    plan.env = {k: v for k, v in plan.env.items() if k not in environ}  # what the user set stays
    plan.argv[1:1] = extra or []
    return plan


def _mpirun(plan: Plan, contexts: list[AppContext], commands: list[list[str]], settings: dict[str, str],
            machine: Machine, transport: str, hosts: Optional[str], hostfile: Optional[str]) -> None:
    given = machine.environ.get("OMPI_MCA_odls_base_sigkill_timeout")
    if given is not None:
        if int(given) < plan.grace_seconds:
            plan.notes.append(f"OMPI_MCA_odls_base_sigkill_timeout={given} from the environment, below the "
                              f"{plan.grace_seconds} s the final checkpoint may need")
        plan.grace_seconds = int(given)
    settings["OMPI_MCA_odls_base_sigkill_timeout"] = str(plan.grace_seconds)
    nodes, slots = hosts_and_slots(hosts, hostfile)
    mca, transport_note = mca_settings(transport, max(nodes, 1), machine.environ)
    plan.notes.insert(0, transport_note)
    argv = ["mpirun"]
    if machine.root:
        argv.append("--allow-run-as-root")
        plan.notes.append("as root")
    capacity, unit = (slots, "slots") if hosts or hostfile else (machine.cores, "cores")
    if capacity is not None and plan.ranks > capacity:
        argv.append("--oversubscribe")
        plan.notes.append(f"{plan.ranks} ranks on {capacity} {unit}: oversubscribed")
    if hosts:
        argv += ["--host", hosts]
    if hostfile:
        argv += ["--hostfile", hostfile]
    argv += mca
    for i, (context, command) in enumerate(zip(contexts, commands)):
        argv += ([":"] if i else []) + ["-np", str(context.ranks), *command]
    plan.argv, plan.env = argv, settings


def _srun(plan: Plan, contexts: list[AppContext], commands: list[list[str]], settings: dict[str, str],
          transport: str, environ: dict[str, str]) -> None:
    """srun runs one program per task range from a --multi-prog file
    (`plan.multi_prog`, written by the launcher); the grace is Slurm's
    KillWait, which a job cannot set."""
    nodes, cpus = slurm_cpus(environ)
    mca, transport_note = mca_settings(transport, nodes, environ)
    for i in range(0, len(mca), 3):
        settings[f"OMPI_MCA_{mca[i + 1]}"] = mca[i + 2]
    plan.notes.insert(0, transport_note)
    argv = ["srun", "--mpi=pmix", f"--ntasks={plan.ranks}"]
    if cpus is not None and plan.ranks > cpus:
        argv.append("--overcommit")
        plan.notes.append(f"{plan.ranks} ranks on {cpus} allocated CPUs: --overcommit")
    plan.notes.append("under srun, Slurm's KillWait bounds a final checkpoint that scancel or the time limit asks "
                      "for (docs/launch.md)")
    lines, first = [], 0
    for context, command in zip(contexts, commands):
        # Slurm's multi-prog file: %t and %o are its own; a literal % is %%.
        words = " ".join(shlex.quote(w).replace("%", "%%") for w in command)
        lines.append(f"{first}-{first + context.ranks - 1} {words}")
        first += context.ranks
    plan.multi_prog = "\n".join(lines) + "\n"
    plan.argv, plan.env = argv + ["--multi-prog", MULTI_PROG_PLACEHOLDER], settings
