"""``LinkedLaunch`` without a GPU: the build/launch plumbing that the conv, attention and
channels-last copy launchers share (the cubin build is replaced by a stub)."""

from __future__ import annotations

import threading

import pytest

from fusec.targets.cuda.attention.cpp import AttentionSpec
from fusec.targets.cuda.attention.launcher import AttentionLaunch
from fusec.targets.cuda.conv.launcher import RelayoutLaunch
from fusec.targets.cuda.conv.transpose import RelayoutSpec
from fusec.targets.cuda.linked import device_address


class _Array:
    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False)}


class _Buffer:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


@pytest.fixture
def builds(monkeypatch) -> list:
    """Each cubin build the launchers ask for (a stub that returns fake bytes)."""
    from fusec.targets.cuda import build

    asked: list = []

    class _Built:
        cubin = b"cubin"

    def fake_build(spec):
        asked.append(spec)
        return _Built()

    monkeypatch.setattr(build, "build", fake_build)
    return asked


def test_relayout_launch_builds_once_and_passes_addresses(builds, monkeypatch) -> None:
    from fusec.targets.cuda.conv import host

    calls: list = []
    made: list = []

    class _Kernel:
        def __init__(self, spec, cubin):
            made.append((spec, cubin))

        def __call__(self, x, xt, stream):
            calls.append((x, xt, stream))

    monkeypatch.setattr(host, "RelayoutKernel", _Kernel)
    spec = RelayoutSpec(64, 64, 9)
    launch = RelayoutLaunch(spec)
    launch.direct(7, [_Buffer(0x1000)], [_Buffer(0x2000)])
    launch((_Array(0x3000),), _Array(0x4000), 0)
    assert made == [(spec, b"cubin")] and builds == [spec]  # built once
    assert calls[0] == (0x1000, 0x2000, 7) and calls[1][:2] == (0x3000, 0x4000)


def test_attention_launch_loads_its_kernel_once(builds, monkeypatch) -> None:
    from fusec.targets.cuda import tensormaps

    monkeypatch.setattr(tensormaps, "LinkedKernel", lambda cubin, smem: ("kernel", cubin, smem))
    spec = AttentionSpec(2, 64, 64, 64, 64)
    launch = AttentionLaunch(spec, {"q": 0, "k": 1, "v": 2})
    results = []
    threads = [threading.Thread(target=lambda: results.append(launch.load())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [("kernel", b"cubin", spec.smem_bytes)] * 4 and builds == [spec]


def test_device_address_names_the_kernel() -> None:
    assert device_address(_Array(0x10), "conv") == 0x10
    with pytest.raises(TypeError, match="the channels-last copy kernel takes device arrays"):
        RelayoutLaunch(RelayoutSpec(1, 8, 1))((object(),), _Array(0), 0)
