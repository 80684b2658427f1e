"""PTX for sm_90 of every CUDA template, compiled with NVVM on a machine without a GPU."""

from __future__ import annotations

import re

import pytest
from cuda_cases import (
    layernorm_residual,
    pointwise_broadcast,
    pointwise_every_unary,
    pointwise_rope,
    pointwise_tail,
    softmax_axis,
    softmax_last,
)

from fusec.targets.cuda.env import simulator_enabled

pytestmark = [
    pytest.mark.requires_target("cuda"),
    pytest.mark.skipif(
        simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1 is set: no PTX under the simulator"
    ),
]


def _ptx(text: str) -> list[tuple[str, str, str]]:
    import fusec

    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes", executable=False)
    return [(k.name, k.kind, ptx) for k, ptx in compiled.assembly("sm_90")]


def _check_common(ptx: str) -> None:
    assert ".target sm_90" in ptx
    assert ".entry" in ptx
    assert ".local" not in ptx, "a register array went to local memory"
    assert not re.search(r"\.f64\b", ptx), "float64 arithmetic in a float32 kernel"


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_pointwise_ptx_uses_16_byte_accesses(dtype: str) -> None:
    ((name, kind, ptx),) = _ptx(pointwise_broadcast(64, 256, dtype))
    assert (name, kind) == ("k0", "pointwise")
    _check_common(ptx)
    # x and the row-broadcast b are vector-loaded; the scalar a and column c are single loads
    assert ptx.count("ld.global.v4.u32") >= 2
    assert "st.global.v4.b32" in ptx


def test_every_unary_op_ptx() -> None:
    # in three kernels: with 20 or more ops in one, the body is too large for NVVM to unroll the
    # vector loop, and its register array goes to local memory
    for part in range(3):
        ((_, _, ptx),) = _ptx(pointwise_every_unary(4096, "f32", part, 3))
        _check_common(ptx)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_rope_ptx_reads_both_halves_in_16_byte_accesses(dtype: str) -> None:
    """q * cos + rotate_half(q) * sin (issue 28): q's vector and its rotated partner (the
    vector n/2 away) are 16-byte loads; nothing spills to local memory."""
    ((_, kind, ptx),) = _ptx(pointwise_rope([1, 32, 128, 128], dtype))
    assert kind == "pointwise"
    _check_common(ptx)
    # q, q rotated, cos and sin: four vector loads a step; y and rotate_half(q) stored
    assert ptx.count("ld.global.v4.u32") >= 4
    assert ptx.count("st.global.v4.b32") >= 2


def test_pointwise_tail_ptx() -> None:
    ((_, _, ptx),) = _ptx(pointwise_tail(1001, "f16"))
    _check_common(ptx)
    assert "ld.global.v4.u32" in ptx


@pytest.mark.parametrize(("rows", "cols"), [(64, 256), (8, 4096)])
def test_layernorm_ptx(rows: int, cols: int) -> None:
    ((_, kind, ptx),) = _ptx(layernorm_residual(rows, cols, "f16"))
    assert kind == "row_reduce"
    _check_common(ptx)
    assert "ld.global.v4.u32" in ptx and "st.global.v4.b32" in ptx
    assert "shfl.sync.bfly" in ptx
    if cols >= 4096:
        assert "bar.sync" in ptx  # block per row: warps combine through shared memory


def test_softmax_ptx() -> None:
    ((_, _, ptx),) = _ptx(softmax_last(16, 4096, "bf16"))
    _check_common(ptx)
    assert "ld.global.v4.u32" in ptx and "st.global.v4.b32" in ptx
    assert "ex2" in ptx


def test_softmax_axis_ptx() -> None:
    ((_, _, ptx),) = _ptx(softmax_axis((4, 128, 64), 1, "f16"))
    _check_common(ptx)


def test_cli_emits_ptx(tmp_path) -> None:
    from fusec.cli import main

    path = tmp_path / "g.mlir"
    path.write_text(pointwise_broadcast(4, 64, "f16"))
    out = tmp_path / "g.ptx"
    assert main(["compile", str(path), "--emit", "ptx", "--arch", "sm_90", "-o", str(out)]) == 0
    text = out.read_text()
    assert "// ===== kernel k0 (pointwise) PTX for sm_90" in text
    assert ".target sm_90" in text


def test_cli_rejects_bad_arch(tmp_path, capsys) -> None:
    from fusec.cli import main

    path = tmp_path / "g.mlir"
    path.write_text(pointwise_tail(8, "f32"))
    assert main(["compile", str(path), "--emit", "ptx", "--arch", "sm_nine"]) == 1
    assert "bad --arch" in capsys.readouterr().err
