"""The CUDA driver emulator itself (cuda_emu.py): it follows the driver API's conventions as
cuda-python exposes them, and it catches what a GPU would get wrong or refuse: racing
threads, out-of-bounds writes, trimmed images, bad launch configurations, host pointers
where device pointers belong."""

from __future__ import annotations

import ctypes

import cuda_emu
import numpy as np
import pytest
from cuda_emu import CUresult, EmulatorFault, FakeDriver

SOURCE = r"""
typedef long long int64_t;
extern "C" __global__ void scale(float* __restrict__ y, float* __restrict__ x, long long n,
                                 int* err) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
       t += (long long)gridDim.x * blockDim.x) {
    y[t] = 2.0f * x[t];
  }
}
extern "C" __global__ void racy(float* __restrict__ y, float* __restrict__ x, long long n,
                                int* err) {
  y[0] = (float)(blockIdx.x * blockDim.x + threadIdx.x);
}
extern "C" __global__ void past_end(float* __restrict__ y, float* __restrict__ x, long long n,
                                    int* err) {
  if (blockIdx.x == 0 && threadIdx.x == 0) y[n] = 1.0f;
}
extern "C" __global__ void flag(float* __restrict__ y, float* __restrict__ x, long long n,
                                int* err) {
  if (threadIdx.x == 3) atomicCAS(err, 0, 9);
}
"""


class _Device:
    """A context on a fresh `FakeDriver`, the module of SOURCE, and helpers to launch."""

    def __init__(self, tmp_path) -> None:
        d = self.d = FakeDriver(tmp_path)
        assert d.cuInit(0) == (CUresult.CUDA_SUCCESS,)
        _, dev = d.cuDeviceGet(0)
        _, ctx = d.cuDevicePrimaryCtxRetain(dev)
        assert d.cuCtxSetCurrent(ctx) == (CUresult.CUDA_SUCCESS,)
        _, self.stream = d.cuStreamCreate(0)
        self.image = cuda_emu.compile_image(SOURCE)
        err, self.module = d.cuModuleLoadData(self.image)
        assert err == CUresult.CUDA_SUCCESS

    def alloc(self, n: int):
        err, ptr = self.d.cuMemAlloc(4 * n)
        assert err == CUresult.CUDA_SUCCESS
        return ptr

    def launch(self, name: str, ptrs, n: int, blocks: int = 2, threads: int = 4) -> CUresult:
        _, fn = self.d.cuModuleGetFunction(self.module, name.encode())
        slots = np.array([int(p) for p in ptrs[:2]] + [n, int(ptrs[2])], dtype=np.int64)
        params = np.array([slots.ctypes.data + 8 * i for i in range(4)], dtype=np.uint64)
        (err,) = self.d.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, self.stream,
                                       params.ctypes.data, 0)
        slots[:] = 0  # the driver copied the values at the launch: clobbering them is safe
        return err


@pytest.fixture
def dev(tmp_path) -> _Device:
    return _Device(tmp_path)


def test_grid_stride_kernel_and_copies(dev: _Device) -> None:
    x = np.arange(37, dtype=np.float32)
    px, py, perr = dev.alloc(37), dev.alloc(37), dev.alloc(1)
    assert dev.d.cuMemcpyHtoD(px, x.ctypes.data, x.nbytes) == (CUresult.CUDA_SUCCESS,)
    assert dev.launch("scale", [py, px, perr], 37) == CUresult.CUDA_SUCCESS
    assert dev.d.stats.launches == 0  # queued on the stream until a synchronizing call
    y = np.zeros(37, dtype=np.float32)
    assert dev.d.cuMemcpyDtoH(y.ctypes.data, py, y.nbytes) == (CUresult.CUDA_SUCCESS,)
    np.testing.assert_array_equal(y, 2 * x)
    assert dev.d.stats.launches == 1 and dev.d.stats.threads == 8


def test_uninitialized_device_memory_reads_as_nan(dev: _Device) -> None:
    p = dev.alloc(3)
    y = np.zeros(3, dtype=np.float32)
    dev.d.cuMemcpyDtoH(y.ctypes.data, p, y.nbytes)
    assert np.isnan(y).all()


def test_racing_threads_are_caught(dev: _Device) -> None:
    px, py, perr = dev.alloc(4), dev.alloc(4), dev.alloc(1)
    dev.launch("racy", [py, px, perr], 4)
    with pytest.raises(EmulatorFault, match="race"):
        dev.d.cuStreamSynchronize(dev.stream)


def test_out_of_bounds_write_is_caught(dev: _Device) -> None:
    px, py, perr = dev.alloc(4), dev.alloc(4), dev.alloc(1)
    dev.launch("past_end", [py, px, perr], 4)
    with pytest.raises(EmulatorFault, match="out-of-bounds"):
        dev.d.cuStreamSynchronize(dev.stream)


def test_host_pointer_as_kernel_argument_is_caught(dev: _Device) -> None:
    host = np.zeros(4, dtype=np.float32)
    px, perr = dev.alloc(4), dev.alloc(1)
    dev.launch("scale", [host.ctypes.data, px, perr], 4)
    with pytest.raises(EmulatorFault, match="not a device allocation"):
        dev.d.cuStreamSynchronize(dev.stream)


def test_atomic_error_cell_and_async_memset(dev: _Device) -> None:
    px, py, perr = dev.alloc(4), dev.alloc(4), dev.alloc(1)
    dev.d.cuMemsetD32Async(perr, 0, 1, dev.stream)
    dev.launch("flag", [py, px, perr], 4)
    code = np.zeros(1, dtype=np.int32)
    dev.d.cuMemcpyDtoH(code.ctypes.data, perr, 4)
    assert code[0] == 9


def test_api_errors(dev: _Device) -> None:
    d = dev.d
    assert d.cuModuleGetFunction(dev.module, b"nope")[0] == CUresult.CUDA_ERROR_NOT_FOUND
    with pytest.raises(TypeError):
        d.cuModuleGetFunction(dev.module, "scale")  # char*: bytes only, as in cuda-python
    assert d.cuMemAlloc(0)[0] == CUresult.CUDA_ERROR_INVALID_VALUE
    p = dev.alloc(2)
    host = np.zeros(4, dtype=np.float32)
    assert d.cuMemcpyHtoD(p, host.ctypes.data, 16) == (CUresult.CUDA_ERROR_INVALID_VALUE,)
    assert d.cuMemcpyDtoH(p, p, 4) == (CUresult.CUDA_ERROR_INVALID_VALUE,)  # dst not host
    px, perr = dev.alloc(4), dev.alloc(1)
    assert dev.launch("scale", [p, px, perr], 2, blocks=0) == CUresult.CUDA_ERROR_INVALID_VALUE
    assert dev.launch("scale", [p, px, perr], 2, threads=2048) == \
        CUresult.CUDA_ERROR_INVALID_VALUE
    assert d.cuMemFree(p) == (CUresult.CUDA_SUCCESS,)
    assert d.cuMemFree(p) == (CUresult.CUDA_ERROR_INVALID_VALUE,)
    assert d.cuGetErrorName(CUresult.CUDA_ERROR_NOT_FOUND) == (
        CUresult.CUDA_SUCCESS, b"CUDA_ERROR_NOT_FOUND")
    with pytest.raises(OverflowError):
        d.cuLaunchKernel(d.cuModuleGetFunction(dev.module, b"scale")[1], -1, 1, 1, 1, 1, 1, 0,
                         dev.stream, None, 0)


def test_calls_need_init_and_a_current_context(tmp_path) -> None:
    d = FakeDriver(tmp_path)
    assert d.cuMemAlloc(4)[0] == CUresult.CUDA_ERROR_NOT_INITIALIZED
    d.cuInit(0)
    assert d.cuMemAlloc(4)[0] == CUresult.CUDA_ERROR_INVALID_CONTEXT


def test_images_must_arrive_whole(dev: _Device) -> None:
    image = dev.image
    assert image.endswith(b"\0" * cuda_emu.TAIL)
    trimmed = image.rstrip(b"\0") + b"\0"
    assert dev.d.cuModuleLoadData(trimmed)[0] == CUresult.CUDA_ERROR_INVALID_IMAGE
    buf = ctypes.create_string_buffer(image, len(image))
    assert dev.d.cuModuleLoadData(ctypes.addressof(buf))[0] == CUresult.CUDA_SUCCESS
    assert dev.d.cuModuleLoadData(b"//PTX text\0")[0] == CUresult.CUDA_ERROR_INVALID_IMAGE


def test_cpp_errors_in_the_source_are_reported(dev: _Device) -> None:
    with pytest.raises(EmulatorFault, match="does not compile"):
        dev.d.cuModuleLoadData(cuda_emu.compile_image('extern "C" __global__ void k( {'))


def _get(dev: _Device, p, n: int) -> np.ndarray:
    y = np.zeros(n, dtype=np.float32)
    assert dev.d.cuMemcpyDtoH(y.ctypes.data, p, y.nbytes) == (CUresult.CUDA_SUCCESS,)
    return y


def test_captured_launches_replay_in_order_with_their_captured_parameters(dev: _Device) -> None:
    d, mode = dev.d, cuda_emu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    x = np.arange(4, dtype=np.float32)
    px, py, pz, perr = dev.alloc(4), dev.alloc(4), dev.alloc(4), dev.alloc(1)
    d.cuMemcpyHtoD(px, x.ctypes.data, x.nbytes)
    assert d.cuStreamBeginCapture(dev.stream, mode) == (CUresult.CUDA_SUCCESS,)
    dev.launch("scale", [py, px, perr], 4)  # y = 2x, then z = 2y: order matters
    dev.launch("scale", [pz, py, perr], 4)
    err, graph = d.cuStreamEndCapture(dev.stream)
    assert err == CUresult.CUDA_SUCCESS and d.stats.launches == 0  # recorded, not run
    err, ex = d.cuGraphInstantiate(graph, 0)
    assert err == CUresult.CUDA_SUCCESS and d.cuGraphDestroy(graph) == (CUresult.CUDA_SUCCESS,)
    for _ in range(2):
        assert d.cuGraphLaunch(ex, dev.stream) == (CUresult.CUDA_SUCCESS,)
    np.testing.assert_array_equal(_get(dev, pz, 4), 4 * x)
    assert d.stats.launches == 4
    x2 = np.full(4, 3.0, dtype=np.float32)  # pageable memory: staged at the call
    assert d.cuMemcpyHtoDAsync(px, x2.ctypes.data, x2.nbytes, dev.stream) == \
        (CUresult.CUDA_SUCCESS,)
    x2[:] = 0.0
    d.cuGraphLaunch(ex, dev.stream)
    np.testing.assert_array_equal(_get(dev, pz, 4), np.full(4, 12.0))
    assert d.cuGraphExecDestroy(ex) == (CUresult.CUDA_SUCCESS,)
    assert d.cuGraphLaunch(ex, dev.stream) == (CUresult.CUDA_ERROR_INVALID_HANDLE,)


def test_a_synchronizing_call_invalidates_a_capture(dev: _Device) -> None:
    d, mode = dev.d, cuda_emu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    px, py, perr = dev.alloc(4), dev.alloc(4), dev.alloc(1)
    host = np.zeros(4, dtype=np.float32)
    d.cuStreamBeginCapture(dev.stream, mode)
    assert d.cuStreamBeginCapture(dev.stream, mode) == (CUresult.CUDA_ERROR_ILLEGAL_STATE,)
    dev.launch("scale", [py, px, perr], 4)
    assert d.cuMemcpyHtoD(px, host.ctypes.data, host.nbytes) == \
        (CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,)
    assert d.cuStreamEndCapture(dev.stream)[0] == CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    d.cuStreamBeginCapture(dev.stream, mode)
    assert d.cuMemAlloc(4)[0] == CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert d.cuStreamEndCapture(dev.stream)[0] == CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert d.stats.launches == 0  # nothing captured ever ran
