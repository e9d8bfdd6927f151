"""The mpirun command line the launcher builds (no MPI needed): one machine gets shared
memory only; a hostfile leaves the transport to Open MPI and exports PYTHONPATH and every
OCANNL_AST_* variable to the other hosts; `--mca NAME VALUE` reaches mpirun and wins over
the launcher's own choice (e.g. the interfaces TCP may use between hosts)."""

from __future__ import annotations

from ocannl_ast.distributed.launch import command, parse


def _mca(cmd: list[str]) -> dict[str, str]:
    return {cmd[i + 1]: cmd[i + 2] for i, a in enumerate(cmd) if a == "--mca"}


def _exported(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"]


ENV = {"PYTHONPATH": "/srv/app", "OCANNL_AST_CHECK": "1", "OCANNL_AST_DIST_TIMEOUT": "60",
       "HOME": "/root", "OMPI_MCA_foo": "bar"}


def test_one_machine_uses_shared_memory_only_and_exports_nothing() -> None:
    env = dict(ENV)
    cmd = command(parse(["--mpirun", "mpirun", "-n", "2", "train.py", "--lr", "1"]), env)
    assert cmd[:3] == ["mpirun", "-n", "2"] and "--oversubscribe" in cmd
    assert _mca(cmd) == {"btl": "self,sm", "btl_tcp_if_include": "lo"}
    assert _exported(cmd) == [] and "--hostfile" not in cmd
    assert cmd[-3:] == ["train.py", "--lr", "1"]


def test_a_hostfile_exports_the_environment_and_takes_the_interface() -> None:
    env = dict(ENV)
    cmd = command(parse(["--mpirun", "mpirun", "-n", "4", "--hostfile", "hosts",
                         "--collective-timeout", "90", "--mca", "btl_tcp_if_include", "eth0",
                         "--mca", "oob_tcp_if_include", "eth0", "train.py"]), env)
    assert cmd[cmd.index("--hostfile") + 1] == "hosts" and "--oversubscribe" not in cmd
    assert _mca(cmd) == {"btl_tcp_if_include": "eth0", "oob_tcp_if_include": "eth0"}
    assert _exported(cmd) == ["OCANNL_AST_CHECK", "OCANNL_AST_DIST_TIMEOUT", "PYTHONPATH"]
    assert float(env["OCANNL_AST_DIST_TIMEOUT"]) == 90


def test_the_callers_transport_wins_on_one_machine() -> None:
    cmd = command(parse(["--mpirun", "mpirun", "--mca", "btl", "self,tcp", "t.py"]), dict(ENV))
    assert _mca(cmd) == {"btl": "self,tcp", "btl_tcp_if_include": "lo"}
