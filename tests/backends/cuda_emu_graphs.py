"""The CUDA emulator's stream capture and graphs (`GraphDriver`, a base of
`cuda_emu.FakeDriver`), and its asynchronous host-to-device copy.

As the driver does: between ``cuStreamBeginCapture`` and ``cuStreamEndCapture`` the work
queued on the capturing stream (launches with their parameter values copied at the call,
memsets) is recorded instead of run; ``cuGraphInstantiate`` makes an executable graph of the
recording and ``cuGraphLaunch`` queues it, in order, on a stream, as many times as it is
launched. A synchronizing call during a capture (a synchronous copy, which would wait for the
capturing stream; synchronizing that stream; allocating or freeing in the capturing thread,
or in any thread under the global mode) fails with the driver's error and invalidates the
capture, so ending it fails too. An asynchronous copy from pageable host memory is staged
(the host bytes read) at the call, and refused inside a capture. ``graphs=False`` models a
driver without graph support: beginning a capture fails with ``CUDA_ERROR_NOT_SUPPORTED``.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any

from cuda_emu_api import (
    CUdeviceptr,
    CUgraph,
    CUgraphExec,
    CUresult,
    CUstream,
    CUstreamCaptureMode,
    _address,
    _host_pointer,
    _uint,
)

_OK = CUresult.CUDA_SUCCESS


@dataclass
class _Copy:
    """A queued host-to-device copy of bytes staged at the call."""

    addr: int
    data: bytes


@dataclass
class _Capture:
    mode: CUstreamCaptureMode
    thread: int
    ops: list[Any] = field(default_factory=list)
    invalidated: bool = False


class GraphDriver:
    """The capture and graph calls; the driver provides `lock`, `streams`, `_ready`,
    `_handle`, `_count`, `find` and `stats`."""

    CUstreamCaptureMode = CUstreamCaptureMode
    CUgraph, CUgraphExec = CUgraph, CUgraphExec

    lock: Any
    streams: dict[int, list[Any]]
    stats: Any

    def _init_graphs(self, graphs: bool) -> None:
        self.graphs_supported = graphs
        self.captures: dict[int, _Capture] = {}  #: stream -> its capture in progress
        self.graphs: dict[int, list[Any]] = {}
        self.execs: dict[int, list[Any]] = {}
        self.graph_launches = 0

    def _queue(self, key: int) -> list[Any] | None:
        """Where work queued on stream `key` goes: its capture's recording, or the stream."""
        cap = self.captures.get(key)
        if cap is not None:
            return cap.ops
        return self.streams.get(key) if key else self.streams.setdefault(0, [])

    def _capture_blocks(self, stream: int | None = None, unsafe: bool = False) -> CUresult:
        """The error of a synchronizing call while a capture runs (invalidating it): one
        that waits for `stream` (None: every blocking stream, as the legacy stream does),
        or an `unsafe` one (allocation) from a thread the capture mode forbids."""
        me = threading.get_ident()
        err = _OK
        for key, cap in self.captures.items():
            if unsafe:
                mode = cap.mode
                if mode == CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED or (
                        mode == CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                        and cap.thread != me):
                    continue
                err = CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            elif stream is None:
                err = CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
            elif stream == key:
                err = CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            else:
                continue
            cap.invalidated = True
        return err

    # ---- calls ------------------------------------------------------------------------

    def cuMemcpyHtoDAsync(self, dstDevice: Any, srcHost: Any, ByteCount: int, hStream: Any
                          ) -> tuple[CUresult]:
        dst = _address(dstDevice, CUdeviceptr, "dstDevice")
        src, _keep = _host_pointer(srcHost, "srcHost")
        n = _uint(ByteCount, "ByteCount", 64)
        if (err := self._ready("cuMemcpyHtoDAsync")) != _OK:
            return (err,)
        with self.lock:
            key = _address(hStream, CUstream, "hStream")
            if key in self.captures:  # pageable memory cannot be captured
                self.captures[key].invalidated = True
                return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
            queue = self._queue(key)
            if queue is None:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            if self.find(dst, n) is None or not src or self.find(src) is not None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            queue.append(_Copy(dst, ctypes.string_at(src, n)))  # staged now
            self.stats.htod_bytes += n
        return (_OK,)

    def cuStreamBeginCapture(self, hStream: Any, mode: CUstreamCaptureMode
                             ) -> tuple[CUresult]:
        if not isinstance(mode, CUstreamCaptureMode):
            raise TypeError("Argument 'mode' has incorrect type (expected CUstreamCaptureMode)")
        if (err := self._ready("cuStreamBeginCapture")) != _OK:
            return (err,)
        if not self.graphs_supported:
            return (CUresult.CUDA_ERROR_NOT_SUPPORTED,)
        with self.lock:
            key = _address(hStream, CUstream, "hStream")
            if key == 0 or key not in self.streams:  # not the legacy stream
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            if key in self.captures:
                return (CUresult.CUDA_ERROR_ILLEGAL_STATE,)
            self.captures[key] = _Capture(mode, threading.get_ident())
        return (_OK,)

    def cuStreamEndCapture(self, hStream: Any) -> tuple[CUresult, CUgraph | None]:
        if (err := self._ready("cuStreamEndCapture")) != _OK:
            return err, None
        with self.lock:
            key = _address(hStream, CUstream, "hStream")
            cap = self.captures.pop(key, None)
            if cap is None:
                return CUresult.CUDA_ERROR_ILLEGAL_STATE, None
            if cap.invalidated:
                return CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None
            g = self._handle(CUgraph)
            self.graphs[int(g)] = list(cap.ops)
        return _OK, g

    def cuGraphInstantiate(self, hGraph: Any, flags: int) -> tuple[CUresult, CUgraphExec | None]:
        _uint(flags, "flags", 64)
        if (err := self._ready("cuGraphInstantiate")) != _OK:
            return err, None
        ops = self.graphs.get(_address(hGraph, CUgraph, "hGraph"))
        if ops is None or flags:
            return CUresult.CUDA_ERROR_INVALID_VALUE, None
        ex = self._handle(CUgraphExec)
        self.execs[int(ex)] = list(ops)  # independent of the graph from now on
        return _OK, ex

    def cuGraphLaunch(self, hGraphExec: Any, hStream: Any) -> tuple[CUresult]:
        if (err := self._ready("cuGraphLaunch")) != _OK:
            return (err,)
        with self.lock:
            ops = self.execs.get(_address(hGraphExec, CUgraphExec, "hGraphExec"))
            queue = self._queue(_address(hStream, CUstream, "hStream"))
            if ops is None or queue is None:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            queue.extend(ops)
            self.graph_launches += 1
        return (_OK,)

    def cuGraphDestroy(self, hGraph: Any) -> tuple[CUresult]:
        self._count("cuGraphDestroy")
        if self.graphs.pop(_address(hGraph, CUgraph, "hGraph"), None) is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (_OK,)

    def cuGraphExecDestroy(self, hGraphExec: Any) -> tuple[CUresult]:
        self._count("cuGraphExecDestroy")
        if self.execs.pop(_address(hGraphExec, CUgraphExec, "hGraphExec"), None) is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (_OK,)
