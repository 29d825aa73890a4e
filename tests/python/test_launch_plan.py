"""perserve-launch's rules, on made-up machines (no MPI; launch_plan.py):
the grace from the checkpoint's size, oversubscription only past the cores,
the root flag only as root, TCP between nodes, the stop signal ignored by
every rank but the servers, .py files under mpi4py, and settings the user
gave left alone. tests/mpi/launch_jobs.py runs real jobs."""
import os
import sys

import pytest

from perserve import launch_plan
from perserve.launch_plan import AppContext, LaunchError, Machine, build_plan, split_contexts

SERVER = ["-n", "1", "perserve-server"]


@pytest.fixture(autouse=True)
def server_on_path(tmp_path, monkeypatch):
    """A perserve-server to find (the plan resolves it to a path)."""
    server = tmp_path / "perserve-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return server


def machine(cores=8, root=False, cma=True, **environ):
    return Machine(cores=cores, root=root, cma_works=cma, environ=dict(environ))


def plan_of(words, **kwargs):
    return build_plan(split_contexts(words), kwargs.pop("machine", machine()), **kwargs)


def test_contexts_split_at_colons_and_need_a_server_and_a_client():
    contexts = split_contexts([*SERVER, "--capacity", "10", ":", "-np", "3", "true", "x"])
    assert contexts == [AppContext(1, "perserve-server", ["--capacity", "10"]), AppContext(3, "true", ["x"])]
    with pytest.raises(LaunchError, match="no perserve-server"):
        split_contexts(["-n", "2", "true"])
    with pytest.raises(LaunchError, match="add the actors"):
        split_contexts(SERVER)
    with pytest.raises(LaunchError, match="starts with -n N"):
        split_contexts([*SERVER, ":", "true"])
    with pytest.raises(LaunchError, match="at least 1"):
        split_contexts([*SERVER, ":", "-n", "0", "true"])


def test_checkpoint_size_from_the_server_flags():
    atari = ["--checkpoint-dir", "d", "--capacity", "1000", "--column", "obs:uint8:84,84,4", "--column", "done:uint8"]
    assert launch_plan.checkpoint_bytes(atari) == 1000 * (84 * 84 * 4 + 1 + 16)
    assert launch_plan.checkpoint_bytes(["--checkpoint-dir=d"]) == (1 << 21) * (45 + 16)  # the default schema
    assert launch_plan.checkpoint_bytes(["--capacity", "10"]) == 0  # no --checkpoint-dir: none written
    steps = ["--checkpoint-dir", "d", "--capacity", "100", "--column", "obs:float32:4", "--n-step", "3",
             "--item-column", "h:float32:8"]
    assert launch_plan.checkpoint_bytes(steps) == 100 * (16 + 24 + 32 + 16)
    with pytest.raises(LaunchError, match="dtype one of"):
        launch_plan.column_bytes("obs:float16:4")


def test_the_grace_grows_with_the_checkpoint():
    small = plan_of([*SERVER, "--capacity", "1000", "--checkpoint-dir", "d", ":", "-n", "1", "true"])
    large = plan_of([*SERVER, "--capacity", "1000000", "--column", "obs:uint8:10000", "--checkpoint-dir", "d", ":",
                     "-n", "1", "true"])
    assert small.grace_seconds == 11 and small.env["OMPI_MCA_odls_base_sigkill_timeout"] == "11"
    assert large.checkpoint_bytes == 1000000 * 10016
    assert large.checkpoint_seconds == pytest.approx(10016e6 / 0.2e9)
    assert large.grace_seconds == launch_plan.grace_for(large.checkpoint_seconds) > 1.5 * large.checkpoint_seconds
    given = plan_of([*SERVER, "--checkpoint-dir", "d", ":", "-n", "1", "true"], checkpoint_seconds=100)
    assert given.grace_seconds == 160


def test_a_grace_from_the_environment_is_kept_and_questioned():
    plan = plan_of([*SERVER, "--capacity", "1000000", "--column", "obs:uint8:10000", "--checkpoint-dir", "d", ":",
                    "-n", "1", "true"], machine=machine(OMPI_MCA_odls_base_sigkill_timeout="5"))
    assert plan.grace_seconds == 5 and "OMPI_MCA_odls_base_sigkill_timeout" not in plan.env
    assert any("below the" in note for note in plan.notes)


def test_oversubscribed_only_when_ranks_outnumber_cores():
    words = [*SERVER, ":", "-n", "3", "true"]
    assert "--oversubscribe" not in plan_of(words, machine=machine(cores=4)).argv
    assert "--oversubscribe" in plan_of(words, machine=machine(cores=2)).argv
    assert "--oversubscribe" not in plan_of(words, machine=machine(cores=1), hosts="a:2,b:2").argv
    assert "--oversubscribe" in plan_of(words, machine=machine(cores=64), hosts="a,b").argv


def test_root_flag_only_as_root():
    words = [*SERVER, ":", "-n", "1", "true"]
    assert "--allow-run-as-root" in plan_of(words, machine=machine(root=True)).argv
    assert "--allow-run-as-root" not in plan_of(words, machine=machine(root=False)).argv


def test_tcp_between_nodes_shared_memory_within_one():
    words = [*SERVER, ":", "-n", "1", "true"]
    one = plan_of(words)
    assert "btl" not in one.argv and one.notes[0] == "shared memory"
    two = plan_of(words, hosts="a,b")
    assert two.argv[two.argv.index("btl") + 1] == "tcp,vader,self"
    assert plan_of(words, transport="tcp").argv[plan_of(words, transport="tcp").argv.index("btl") + 1] == "tcp,self"
    assert "btl" not in plan_of(words, hosts="a,b", machine=machine(OMPI_MCA_btl="openib,self")).argv
    assert "btl" not in plan_of(words, hosts="a,b", transport="default").argv


def test_clients_ignore_the_stop_the_server_takes_it(server_on_path, tmp_path):
    script = tmp_path / "actor.py"
    script.write_text("")
    argv = plan_of([*SERVER, "--alpha", "0.5", ":", "-n", "2", str(script), "--seed", "1"]).argv
    server_at = argv.index("-np")
    assert argv[server_at + 2:server_at + 5] == [str(server_on_path), "--alpha", "0.5"]
    client = argv[argv.index(":") + 3:]
    assert client == [*launch_plan.IGNORE_STOP, sys.executable, "-m", "mpi4py", str(script), "--seed", "1"]
    with pytest.raises(LaunchError, match="no such file"):
        plan_of([*SERVER, ":", "-n", "1", str(tmp_path / "missing.py")])
    with pytest.raises(LaunchError, match="not found on PATH"):
        plan_of([*SERVER, ":", "-n", "1", "no-such-program-here"])


def test_cross_memory_attach_decides_the_single_copy_setting():
    words = [*SERVER, ":", "-n", "1", "true"]
    assert "OMPI_MCA_btl_vader_single_copy_mechanism" not in plan_of(words, machine=machine(cma=True)).env
    assert plan_of(words, machine=machine(cma=False)).env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none"
    assert isinstance(launch_plan.cross_memory_attach_works(), bool)  # and this machine's answer does not hang


def test_srun_gets_a_multi_prog_file_and_the_transport_by_environment():
    environ = {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_CPUS_PER_NODE": "2(x2)"}
    plan = plan_of([*SERVER, "--seed", "5%", ":", "-n", "4", "true"], launcher="srun", machine=machine(**environ))
    assert plan.argv[:4] == ["srun", "--mpi=pmix", "--ntasks=5", "--overcommit"]
    assert plan.multi_prog.splitlines()[0].startswith("0-0 ") and "5%%" in plan.multi_prog
    assert plan.multi_prog.splitlines()[1].startswith("1-4 /bin/sh -c")
    assert plan.env["OMPI_MCA_btl"] == "tcp,vader,self"
    assert launch_plan.slurm_cpus({"SLURM_JOB_CPUS_PER_NODE": "72(x2),36"}) == (1, 180)
