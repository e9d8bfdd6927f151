"""CUDA graphs of a routine's launches: capture once, replay with one driver call.

Stage: run time. Input: the routine's stream and a function that launches its kernels in
order. Output: `GraphCache.launch`, which replays the executable graph captured for the
current kernel parameters, capturing it first on a miss. The driver copies the kernel
parameters into the graph at capture, so a graph is keyed by every value in the parameter
slots: the device addresses of the bound arrays (the error word's and the static arguments'
array are the routine's own, fixed; static argument values are read from that array on the
device, so they are not part of the key). At most `CAPACITY` graphs are kept per routine,
the least recently used one destroyed first. When capture is unavailable or fails (an older
driver, a binding without the graph calls, a launch refused while capturing), the cache
turns itself off for the routine and says why (`state`); the caller then launches directly.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from ocannl_ast.errors import BackendError

#: Executable graphs kept per routine (one per binding of its arrays).
CAPACITY = 8


def _ok(result: Any, what: str) -> Any:
    """The first value of a driver call's result tuple, or a BackendError naming the call."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise BackendError(f"CUDA {what} failed: {getattr(err, 'name', err)}")
    return values[0] if values else None


def _destroy(driver: Any, execs: OrderedDict[Hashable, Any]) -> None:
    with contextlib.suppress(Exception):  # a finalizer: at shutdown the driver may be gone
        while execs:
            _, ex = execs.popitem(last=False)
            driver.cuGraphExecDestroy(ex)


class GraphCache:
    """The executable graphs of one routine's launch sequence, by parameter values."""

    def __init__(self, owner: object, driver: Any, stream: Any, enabled: bool) -> None:
        self.driver, self.stream = driver, stream
        self.execs: OrderedDict[Hashable, Any] = OrderedDict()
        self.state = "on" if enabled else "off (OCANNL_AST_CUDA_GRAPHS=0)"
        self.captures = 0  #: how many graphs were captured (misses)
        weakref.finalize(owner, _destroy, driver, self.execs)

    @property
    def enabled(self) -> bool:
        return self.state == "on"

    def launch(self, key: Hashable, launch_all: Callable[[], None]) -> bool:
        """Replay the graph of `key` on the stream (captured from `launch_all` on a miss);
        False when graphs are off for this routine: the caller launches directly."""
        ex = self.execs.get(key)
        if ex is None:
            ex = self._capture(launch_all)
            if ex is None:
                return False
            self.execs[key] = ex
            if len(self.execs) > CAPACITY:
                _, old = self.execs.popitem(last=False)
                self.driver.cuGraphExecDestroy(old)
        else:
            self.execs.move_to_end(key)
        _ok(self.driver.cuGraphLaunch(ex, self.stream), "cuGraphLaunch")
        return True

    def _capture(self, launch_all: Callable[[], None]) -> Any:
        drv = self.driver
        try:
            mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            _ok(drv.cuStreamBeginCapture(self.stream, mode), "cuStreamBeginCapture")
        except (AttributeError, TypeError, BackendError) as exc:  # no graph API here
            self.state = f"off (capture unavailable: {exc})"
            return None
        failure: Exception | None = None
        try:
            launch_all()
        except (TypeError, BackendError) as exc:  # a launch refused while capturing
            failure = exc
        # ends the capture in every case (an invalidated one with an error and no graph):
        # the stream must never stay in capture mode, or later launches would not run
        err, graph = drv.cuStreamEndCapture(self.stream)
        try:
            if failure is not None:
                raise failure
            _ok((err, graph), "cuStreamEndCapture")
            ex = _ok(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except (TypeError, BackendError) as exc:
            self.state = f"off (capture failed: {exc})"
            return None
        finally:
            if graph is not None and int(err) == 0:
                drv.cuGraphDestroy(graph)  # the executable graph is independent of it
        self.captures += 1
        return ex

    def clear(self) -> None:
        _destroy(self.driver, self.execs)
