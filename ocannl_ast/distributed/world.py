"""The world: this process's rank among `size`, its communicator, and the watchdog that ends
the job when a collective waits longer than the timeout (a dead or stalled peer). Input:
`ocd.init(backend=..., timeout=...)`. Output: the process-wide `World`."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ArgumentError, DistributedError
from . import comm as C

#: seconds a collective may wait for the slowest rank before the job is aborted
DEFAULT_TIMEOUT = 300.0


class Watchdog:
    """A daemon thread that aborts the communicator when the collective the main thread
    entered (`guard`) has not returned within the timeout; every rank's watchdog does the
    same, so no rank is left blocked. The message says what was awaited and for how long."""

    def __init__(self, comm: C.Communicator, timeout: float) -> None:
        self.comm = comm
        self.timeout = timeout
        self._what: str | None = None
        self._deadline = 0.0
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="ocd-watchdog", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        with self._cv:
            self._what, self._deadline = what, time.monotonic() + self.timeout
            self._cv.notify()
        try:
            yield
        finally:
            with self._cv:
                self._what = None

    def _watch(self) -> None:
        while True:
            with self._cv:
                while self._what is None:
                    self._cv.wait()
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(min(left, 1.0))
                    continue
                what = self._what
            sys.stdout.flush()
            sys.stderr.write(
                f"ocannl_ast.distributed: DistributedError: rank {self.comm.rank} of "
                f"{self.comm.size} waited more than {self.timeout:g} s in {what}: a peer "
                "died or stalled; aborting the job\n")
            sys.stderr.flush()
            self.comm.abort(3)


class World:
    """This process's place among the ranks: ``world.rank``, ``world.size``.

    Example: ``world = ocd.init(); print(world.rank, world.size)``.
    """

    def __init__(self, comm: C.Communicator, timeout: float) -> None:
        self.comm = comm
        self.rank = comm.rank
        self.size = comm.size
        self.backend = comm.backend
        self.timeout = timeout
        self._watchdog = Watchdog(comm, timeout) if comm.size > 1 else None

    def __repr__(self) -> str:
        return f"World(rank={self.rank}, size={self.size}, backend={self.backend!r})"

    def guard(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Watch a collective: abort the job if it waits longer than the timeout."""
        return self._watchdog.guard(what) if self._watchdog else contextlib.nullcontext()

    def allreduce_mean_(self, buf: np.ndarray) -> None:
        """Average `buf` over the ranks in place (sum, then times 1/size: the same bits on
        every rank, since every rank scales the same sum)."""
        if self.size == 1:
            return
        with self.guard("the all-reduce of gradients"):
            self.comm.allreduce_(buf)
        buf *= buf.dtype.type(1.0 / self.size)

    def allgather(self, obj: Any, what: str) -> list[Any]:
        if self.size == 1:
            return [obj]
        with self.guard(what):
            return self.comm.allgather(obj)

    def broadcast(self, obj: Any, what: str, root: int = 0) -> Any:
        if self.size == 1:
            return obj
        with self.guard(what):
            return self.comm.broadcast(obj, root)

    def barrier(self, what: str = "a barrier") -> None:
        if self.size > 1:
            with self.guard(what):
                self.comm.barrier()


_world: World | None = None
_lock = threading.Lock()


def init(backend: str = "auto", *, timeout: float | None = None) -> World:
    """Join the world the launcher started (idempotent: later calls return the same world).

    backend: "auto" (MPI under mpirun, gloo when torch.distributed's variables are set, else a
    world of one), "mpi", "gloo" or "local". timeout: seconds a collective may wait for the
    slowest rank before the whole job is aborted (default: $OCANNL_AST_DIST_TIMEOUT or 300).

    Example: ``world = ocd.init(); x_mine = ocd.shard(x)``.
    """
    global _world
    if not isinstance(backend, str) or backend not in C.BACKENDS:
        raise ArgumentError(f"ocd.init: backend must be one of {C.BACKENDS}, got {backend!r}")
    limit = _timeout(timeout)
    with _lock:
        if _world is not None:
            if backend not in ("auto", _world.backend):
                raise DistributedError(f"ocd.init(backend={backend!r}): this process already "
                                       f"joined a world over {_world.backend!r}")
            return _world
        comm = C.connect(backend, limit)
        if comm.size > 1:
            C.install_excepthook(comm)
            _die_with_parent()
        _world = World(comm, limit)
        return _world


def _die_with_parent() -> None:
    """A rank whose launcher (mpirun's daemon) dies gets SIGTERM instead of living on as an
    orphan (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))


def current() -> World:
    """The world `init` joined, joining it (backend 'auto') on first use."""
    return _world if _world is not None else init()


def _timeout(timeout: float | None) -> float:
    if timeout is None:
        env = os.environ.get("OCANNL_AST_DIST_TIMEOUT")
        try:
            return float(env) if env else DEFAULT_TIMEOUT
        except ValueError:
            raise ArgumentError(f"OCANNL_AST_DIST_TIMEOUT must be a number of seconds, got "
                                f"{env!r}") from None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ArgumentError(f"ocd.init: timeout must be a positive number of seconds, got "
                            f"{timeout!r}")
    return float(timeout)
