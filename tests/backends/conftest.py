"""Fixtures of the backend tests: the CUDA driver emulator (`cuda_emu`) and `cuda_device`, a
real GPU where one is usable, else the emulator."""

from __future__ import annotations

from collections.abc import Iterator

import cuda_emu
import pytest

from ocannl_ast.backends import cuda_nvrtc
from ocannl_ast.errors import BackendError


@pytest.fixture(scope="session")
def emu_driver(tmp_path_factory: pytest.TempPathFactory) -> cuda_emu.FakeDriver:
    """One emulated device for the session (device arrays outlive single tests); its g++
    builds are cached next to the NVRTC cache (``$OCANNL_AST_CACHE/cuda_emu``)."""
    directory = cuda_nvrtc.cuda_cache_dir().parent / "cuda_emu"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        directory = tmp_path_factory.mktemp("cuda_emu")
    return cuda_emu.FakeDriver(directory)


@pytest.fixture
def cuda_emu_driver(emu_driver: cuda_emu.FakeDriver) -> Iterator[cuda_emu.FakeDriver]:
    """`backend="cuda"` runs on the emulator during the test (`cuda_emu.installed`)."""
    with cuda_emu.installed(emu_driver):
        yield emu_driver


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
