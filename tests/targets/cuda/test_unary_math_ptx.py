"""PTX for sm_90 of the unary maths the every-unary chain of test_cuda_ptx leaves out
(log, asin, acos, atanh, acosh: defined on part of the line; sin, cos, tan): float32
libdevice calls, no float64 arithmetic (a float64 fallback of math.* would show). The
only local memory is libdevice's: sinf/cosf/tanf reduce huge arguments (Payne-Hanek)
in a small local array, on their slow path only."""

from __future__ import annotations

import re

import pytest
from cuda_cases import pointwise_domain_math

from fusec.targets.cuda.env import simulator_enabled

pytestmark = [
    pytest.mark.requires_target("cuda"),
    pytest.mark.skipif(
        simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1 is set: no PTX under the simulator"
    ),
]


def _ptx(text: str) -> str:
    import fusec

    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    assert ".target sm_90" in ptx and ".entry" in ptx
    return ptx


def test_domain_limited_maths_compile_to_float32_ptx() -> None:
    ptx = _ptx(pointwise_domain_math(4096, "f32", trig=False))
    assert ".local" not in ptx, "a register array went to local memory"
    assert not re.search(r"\.f64\b", ptx), "float64 arithmetic in a float32 kernel"


def test_trigonometry_keeps_libdevice_reduction_only() -> None:
    """sinf/cosf/tanf of libdevice reduce arguments beyond ~1e5 with a 28-byte local
    array and float64 arithmetic, on that slow path only: nothing else goes local."""
    ptx = _ptx(pointwise_domain_math(4096, "f32"))
    depots = re.findall(r"__local_depot\d+\[(\d+)\]", ptx)
    assert all(int(size) <= 3 * 32 for size in depots), depots
