"""Fixtures of the backend tests: the CUDA driver emulator (`cuda_emu`) and `cuda_device`, a
real GPU where one is usable, else the emulator."""

from __future__ import annotations

from collections.abc import Iterator

import cuda_emu
import pytest

from ocannl_ast.backends import cuda_nvrtc, cuda_runtime
from ocannl_ast.errors import BackendError


def _nvrtc_available() -> bool:
    try:
        cuda_nvrtc.nvrtc_version()
    except BackendError:
        return False
    return True


@pytest.fixture(scope="session")
def emu_driver(tmp_path_factory: pytest.TempPathFactory) -> cuda_emu.FakeDriver:
    """One emulated device for the session (device arrays outlive single tests)."""
    return cuda_emu.FakeDriver(tmp_path_factory.mktemp("cuda_emu"))


@pytest.fixture
def cuda_emu_driver(emu_driver: cuda_emu.FakeDriver,
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[cuda_emu.FakeDriver]:
    """`backend="cuda"` runs on the emulator: the driver is `FakeDriver`, images are the
    emulator's (each source still goes through the real NVRTC first where it is installed,
    so it must compile for the device's architecture)."""
    real_compile = cuda_runtime.compile_ptx
    nvrtc = _nvrtc_available()

    def compile_image(name: str, source: str, arch: str) -> bytes:
        if nvrtc:
            real_compile(name, source, arch)
        return cuda_emu.compile_image(source)

    monkeypatch.setattr(cuda_runtime, "driver_module", lambda: emu_driver)
    monkeypatch.setattr(cuda_runtime, "compile_ptx", compile_image)
    if not nvrtc:
        monkeypatch.setattr(cuda_nvrtc, "nvrtc_version", lambda: "emulated")
    cuda_runtime._open_device.cache_clear()
    try:
        yield emu_driver
        emu_driver.synchronize_all()
    finally:
        cuda_runtime._open_device.cache_clear()


def _real_gpu() -> str | None:
    try:
        from ocannl_ast.backends import get_backend

        get_backend("cuda").ensure_runtime()
    except BackendError as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def real_gpu_missing() -> str | None:
    return _real_gpu()


@pytest.fixture
def cuda_device(real_gpu_missing: str | None, request: pytest.FixtureRequest) -> str:
    """"gpu" where a CUDA device is usable, else "emulator" (with the emulator installed)."""
    if real_gpu_missing is None:
        return "gpu"
    request.getfixturevalue("cuda_emu_driver")
    return "emulator"
