"""The launcher: ``python -m ocannl_ast.distributed.launch -n N script.py [args...]`` starts N
ranks of a script (wrapping Open MPI's mpirun), with what mpirun needs here (running as
root, shared-memory transport when every rank is local), prints each rank's output
prefixed by its rank, exits non-zero when any rank fails, and within --timeout, and leaves
no process behind. Input: the command line. Output: the job's exit status."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

#: mpirun's `--output tag` prefix: "[jobid,rank]<stdout>: "
_TAG = re.compile(r"^\[\d+,(\d+)\]<(stdout|stderr)>: ?")
#: seconds between asking the job to end (SIGTERM) and killing what is left
GRACE = 3.0
#: how each rank starts the script: first asking Linux for SIGTERM when its parent (mpirun's
#: daemon) dies, so that no rank outlives the job however it ends; then the script as
#: `python script.py args` would run it
BOOT = """\
import os, runpy, signal, sys
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))
    if os.getppid() == 1:
        sys.exit("launch: the job ended before this rank started")
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m ocannl_ast.distributed.launch",
        description="Start N ranks of a data-parallel script (see docs/distributed.md).")
    ap.add_argument("-n", "--np", type=int, default=2, dest="n", help="number of ranks")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds the whole job may run before it is ended (exit 124)")
    ap.add_argument("--hostfile", default=None,
                    help="an Open MPI hostfile: ranks on several hosts (TCP transport)")
    ap.add_argument("--backend", choices=["mpi", "gloo"], default="mpi",
                    help="the communicator the ranks use (gloo needs PyTorch)")
    ap.add_argument("--collective-timeout", type=float, default=None,
                    help="seconds a collective may wait for a peer (OCANNL_AST_DIST_TIMEOUT)")
    ap.add_argument("--mpirun", default=None, help="the mpirun to use")
    ap.add_argument("--mca", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="an Open MPI parameter for mpirun, e.g. --mca btl_tcp_if_include "
                         "eth0 (repeatable)")
    ap.add_argument("script", help="the Python script every rank runs")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    ns = ap.parse_args(argv)
    if ns.n < 1:
        ap.error(f"-n must be at least 1, got {ns.n}")
    if ns.timeout is not None and ns.timeout <= 0:
        ap.error(f"--timeout must be positive, got {ns.timeout}")
    return ns


def find_mpirun(given: str | None) -> str:
    """The mpirun beside this Python (the Open MPI wheel of the `dist` extra), else PATH's."""
    if given:
        return given
    beside = Path(sys.executable).parent / "mpirun"
    found = str(beside) if beside.exists() else shutil.which("mpirun")
    if found is None:
        sys.exit("launch: mpirun not found: pip install 'ocannl_ast[dist]' (mpi4py and the "
                 "Open MPI wheels)")
    return found


def command(ns: argparse.Namespace, env: dict[str, str]) -> list[str]:
    """The mpirun command line, and what its environment needs (updated in `env`)."""
    cmd = [find_mpirun(ns.mpirun), "-n", str(ns.n), "--output", "tag"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mca = dict(ns.mca)  # the caller's Open MPI parameters win over the launcher's
    if ns.hostfile:
        cmd += ["--hostfile", ns.hostfile]
    else:  # every rank on this machine: shared memory, nothing on the network
        cmd.append("--oversubscribe")
        mca = {"btl": "self,sm", "btl_tcp_if_include": "lo", **mca}
    for name, value in mca.items():
        cmd += ["--mca", name, value]
    if ns.collective_timeout is not None:
        env["OCANNL_AST_DIST_TIMEOUT"] = str(ns.collective_timeout)
    if ns.backend == "gloo":
        env["OCANNL_AST_DIST_BACKEND"] = "gloo"
        env.setdefault("MASTER_ADDR", "127.0.0.1" if not ns.hostfile else socket.getfqdn())
        env.setdefault("MASTER_PORT", str(_free_port()))
    if ns.hostfile:  # other hosts get only what is exported
        for var in sorted(env):
            if var in ("PYTHONPATH", "MASTER_ADDR", "MASTER_PORT") or \
                    var.startswith("OCANNL_AST_"):
                cmd += ["-x", var]
    return [*cmd, sys.executable, "-u", "-c", BOOT, ns.script, *ns.args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In mpirun, before it starts: SIGTERM when the launcher dies, even by SIGKILL (Linux;
    mpirun then ends its ranks), so a killed launcher leaves no job behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _relay(src: IO[bytes], dst: IO[str]) -> None:
    """Copy mpirun's tagged lines, each prefixed by its rank instead of mpirun's tag."""
    for raw in iter(src.readline, b""):
        line = raw.decode(errors="replace")
        m = _TAG.match(line)
        line = line if line.endswith("\n") else line + "\n"
        dst.write(f"[rank {m.group(1)}] {line[m.end():]}" if m else f"[mpirun] {line}")
        dst.flush()


def _session_pids(sid: int) -> list[int]:
    """Every process of session `sid` (Linux /proc): the job's ranks and helpers."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid and int(entry.name) != os.getpid():
            out.append(int(entry.name))
    return out


def end_job(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the job's session, SIGKILL to whatever is left after GRACE seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _session_pids(proc.pid) if Path("/proc").is_dir() else [proc.pid]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline and _session_pids(proc.pid):
            time.sleep(0.05)
        if sig is signal.SIGTERM:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    try:
        proc.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:
        pass


def run(ns: argparse.Namespace) -> int:
    env = dict(os.environ)
    cmd = command(ns, env)
    # preexec_fn is safe here: the launcher starts no thread before mpirun is forked
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_die_with_parent)  # noqa: PLW1509
    assert proc.stdout is not None and proc.stderr is not None
    relays = [threading.Thread(target=_relay, args=(proc.stdout, sys.stdout), daemon=True),
              threading.Thread(target=_relay, args=(proc.stderr, sys.stderr), daemon=True)]
    for t in relays:
        t.start()
    stop: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    deadline = None if ns.timeout is None else time.monotonic() + ns.timeout
    while proc.poll() is None and not stop:
        if deadline is not None and time.monotonic() > deadline:
            break
        time.sleep(0.05)
    code = proc.poll()
    if code is None:
        why = (f"signal {stop[0]}" if stop else f"the --timeout of {ns.timeout:g} s passed")
        sys.stderr.write(f"launch: {why}: ending the job ({ns.n} ranks)\n")
        end_job(proc)
        code = 128 + stop[0] if stop else 124
    else:
        end_job(proc)  # ranks an abnormal end may have left behind
    for t in relays:
        t.join(timeout=2.0)
    if code != 0:
        sys.stderr.write(f"launch: the job failed (exit status {code})\n")
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    return run(parse(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
