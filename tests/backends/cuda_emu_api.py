"""The CUDA emulator's types as cuda-python 12.x spells them (`CUresult`, handles with
``__int__``/``__index__``) and its argument conversions (Cython ``unsigned int`` and
``size_t``, handle-or-int addresses, ``void*`` as an int or a buffer)."""

from __future__ import annotations

import ctypes
import enum
import operator
from typing import Any


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_ILLEGAL_STATE = 401
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_NOT_SUPPORTED = 801
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906


class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CUstreamCaptureMode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


class _Handle:
    def __init__(self, value: int = 0) -> None:
        self._value = int(value)

    def __int__(self) -> int:
        return self._value

    def __index__(self) -> int:
        return self._value

    def getPtr(self) -> int:
        return self._value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and int(other) == self._value  # type: ignore

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._value))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} 0x{self._value:x}>"


class CUdevice(_Handle): ...
class CUcontext(_Handle): ...
class CUstream(_Handle): ...
class CUmodule(_Handle): ...
class CUfunction(_Handle): ...
class CUdeviceptr(_Handle): ...
class CUgraph(_Handle): ...
class CUgraphExec(_Handle): ...


def _uint(value: Any, what: str, bits: int = 32) -> int:
    """As Cython converts an ``unsigned int`` / ``size_t`` argument."""
    if not isinstance(value, int):
        raise TypeError(f"an integer is required for {what}, got {type(value).__name__}")
    if not 0 <= value < 1 << bits:
        raise OverflowError(f"{what}={value} does not fit an unsigned {bits}-bit int")
    return value


def _address(value: Any, cls: type[_Handle], what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, cls):
        return int(value)
    if isinstance(value, int):
        return _uint(value, what, 64)
    raise TypeError(f"Argument '{what}' is not instance of type (expected {cls.__name__}, "
                    f"int or None), got {type(value).__name__}")


def _host_pointer(value: Any, what: str) -> tuple[int, Any]:
    """An ``Any`` void* argument: an int address or an object with the buffer protocol."""
    if value is None:
        return 0, None
    try:  # cuda-python first converts to an integer address (int, CUdeviceptr...)
        return operator.index(value), None
    except TypeError:
        pass
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"Argument '{what}' is not an int address or a buffer") from None
    buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly else \
        (ctypes.c_char * view.nbytes).from_buffer(view)
    return ctypes.addressof(buf), buf


#: The ctypes of the kernel parameter types by value (a pointer is 8 bytes).
_CTYPES: dict[str, Any] = {
    "int": ctypes.c_int, "unsigned int": ctypes.c_uint, "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong, "float": ctypes.c_float,
    "double": ctypes.c_double, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
}
