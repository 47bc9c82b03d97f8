"""Fixtures for GPU tests: skip cleanly without a CUDA device or a kernel bundle.

The device is detected through cuda.bindings (cuInit + cuDeviceGetCount), never through torch.
"""

import functools

import pytest


@functools.lru_cache(maxsize=None)
def cuda_device_status() -> tuple[bool, str]:
    """(True, "") when a CUDA device is usable, else (False, why)."""
    from fa4mlir.testing import gpu_available
    return gpu_available()


def device_compute_capability(ordinal: int = 0) -> tuple[int, int]:
    from cuda.bindings import driver
    attr = driver.CUdevice_attribute
    _, dev = driver.cuDeviceGet(ordinal)
    _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    return major, minor


def require_arch(major: int) -> tuple[int, int]:
    """Skip the calling test unless device 0 has compute capability ``major``.x; returns (major, minor)."""
    ok, why = cuda_device_status()
    if not ok:
        pytest.skip(why)
    cc = device_compute_capability()
    if cc[0] != major:
        pytest.skip(f"needs an sm_{major}x GPU, this one is sm_{cc[0]}{cc[1]}")
    return cc


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, why = cuda_device_status()
    if not ok:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"GPU test skipped: {why}"))


@pytest.fixture(scope="session")
def bundle():
    """The kernel bundle named by FA4MLIR_BUNDLE, opened with fa4mlir.runtime.Bundle."""
    from fa4mlir import env
    from fa4mlir.runtime import Bundle

    path = env.bundle_dir()
    if path is None:
        pytest.skip("FA4MLIR_BUNDLE is unset: build a bundle and point FA4MLIR_BUNDLE at its folder")
    if not (path / "manifest.json").is_file():
        pytest.skip(f"FA4MLIR_BUNDLE={path} holds no manifest.json: build the bundle there first")
    return Bundle.open(path)


@pytest.fixture(name="require_arch", scope="session")
def require_arch_fixture():
    """``require_arch`` as a fixture, for test modules that cannot import this conftest."""
    return require_arch
