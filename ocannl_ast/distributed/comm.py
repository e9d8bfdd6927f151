"""Communicators: the few collectives data parallelism needs (sum all-reduce in place,
broadcast and all-gather of small Python objects, barrier, abort) behind one protocol, over
MPI (mpi4py), gloo (torch.distributed) or a world of one. Input: the launcher's environment.
Output: a `Communicator`; mpi4py and torch are imported only by the backend that uses them."""

from __future__ import annotations

import os
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, NoReturn, Protocol

import numpy as np

from ..errors import DistributedError

#: environment variables that say "started by mpirun / mpiexec" (Open MPI, PMIx, MPICH)
MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE")
BACKENDS = ("auto", "mpi", "gloo", "local")
#: seconds a rank that raised DistributedError waits before aborting the job (its peers,
#: which raise the same error, print theirs meanwhile)
PEER_GRACE = 1.0


class Communicator(Protocol):
    """What data parallelism calls; every collective is called by every rank, in order."""

    rank: int  #: this process's rank, 0 .. size-1
    size: int  #: how many ranks
    backend: str  #: "mpi", "gloo" or "local"

    def allreduce_(self, buf: np.ndarray) -> None:
        """Sum `buf` (C-contiguous) over the ranks, in place."""

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """`obj` of rank `root`, on every rank."""

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (small objects: digests, names)."""

    def barrier(self) -> None:
        """Return once every rank reached it."""

    def abort(self, code: int) -> NoReturn:
        """End the whole job (every rank) with exit status `code`."""


class LocalComm:
    """A world of one: every collective is the identity."""

    rank, size, backend = 0, 1, "local"

    def allreduce_(self, buf: np.ndarray) -> None:
        pass

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return obj

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        pass

    def abort(self, code: int) -> NoReturn:
        os._exit(code)


class MpiComm:
    """MPI_COMM_WORLD through mpi4py (the `dist` extra)."""

    backend = "mpi"

    def __init__(self) -> None:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise DistributedError(
                "backend 'mpi' needs mpi4py and an MPI library: pip install "
                f"'ocannl_ast[dist]' (mpi4py + the Open MPI wheels) ({e})") from None
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = int(self.comm.Get_rank())
        self.size = int(self.comm.Get_size())

    def allreduce_(self, buf: np.ndarray) -> None:
        self.comm.Allreduce(self._mpi.IN_PLACE, buf, op=self._mpi.SUM)

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        return list(self.comm.allgather(obj))

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int) -> NoReturn:
        self.comm.Abort(code)
        os._exit(code)  # pragma: no cover - Abort does not return


class GlooComm:
    """torch.distributed's gloo backend (optional: PyTorch is a large dependency). Rank
    and size come from the launcher (mpirun's variables, or RANK / WORLD_SIZE), the
    rendezvous from MASTER_ADDR / MASTER_PORT; gloo's own timeout bounds every collective."""

    backend = "gloo"

    def __init__(self, timeout: float) -> None:
        try:
            import torch
            import torch.distributed as tdist
        except ImportError as e:
            raise DistributedError(f"backend 'gloo' needs PyTorch (pip install torch) ({e})"
                                   ) from None
        self._torch, self._dist = torch, tdist
        self.rank, self.size = env_rank_size()
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ.get("MASTER_PORT")
        if port is None and self.size > 1:
            raise DistributedError("backend 'gloo' needs MASTER_PORT (and MASTER_ADDR on "
                                   "several hosts): the launcher sets them")
        if not tdist.is_initialized():
            tdist.init_process_group("gloo", init_method=f"tcp://{addr}:{port or 29500}",
                                     rank=self.rank, world_size=self.size,
                                     timeout=timedelta(seconds=timeout))

    def allreduce_(self, buf: np.ndarray) -> None:
        self._dist.all_reduce(self._torch.from_numpy(buf))

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=root)
        return box[0]

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        self._dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        self._dist.barrier()

    def abort(self, code: int) -> NoReturn:
        os._exit(code)


def env_rank_size() -> tuple[int, int]:
    """Rank and size from the launcher's environment; (0, 1) for a plain run."""
    for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                 ("RANK", "WORLD_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return 0, 1


def pick_backend(backend: str) -> str:
    """'auto': MPI when started by mpirun, gloo when torch.distributed's variables are set,
    otherwise a world of one (a plain `python script.py` needs nothing installed)."""
    if backend != "auto":
        return backend
    if any(v in os.environ for v in MPI_ENV):
        return os.environ.get("OCANNL_AST_DIST_BACKEND", "mpi")
    if "WORLD_SIZE" in os.environ and "MASTER_PORT" in os.environ:
        return "gloo"
    return "local"


def connect(backend: str, timeout: float) -> Communicator:
    """The communicator of a backend name ('auto' resolved by `pick_backend`)."""
    chosen = pick_backend(backend)
    if chosen == "mpi":
        return MpiComm()
    if chosen == "gloo":
        return GlooComm(timeout)
    if chosen == "local":
        if env_rank_size()[1] > 1:
            raise DistributedError("backend 'local' is a world of one, but the launcher "
                                   f"started {env_rank_size()[1]} ranks: use 'mpi' or 'gloo'")
        return LocalComm()
    raise DistributedError(f"unknown backend {backend!r}: expected one of {BACKENDS}")


def install_excepthook(comm: Communicator) -> None:
    """An uncaught exception on one rank ends the job instead of leaving its peers blocked in
    a collective: print it (prefixed by the rank), then abort every rank."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if kind is KeyboardInterrupt:
            previous(kind, value, tb)
            comm.abort(130)
        text = "".join(traceback.format_exception(kind, value, tb))
        sys.stderr.write(text)
        sys.stderr.write(f"ocannl_ast.distributed: rank {comm.rank} of {comm.size} failed "
                         "(above): aborting the job\n")
        sys.stderr.flush()
        sys.stdout.flush()
        if issubclass(kind, DistributedError):
            time.sleep(PEER_GRACE)  # raised on every rank: let the peers report it too
        comm.abort(1)

    sys.excepthook = hook
