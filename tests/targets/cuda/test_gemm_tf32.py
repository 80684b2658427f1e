"""``precision="tf32"`` on the cuda target without a GPU (issue 28): plans, tiles, kernel text,
PTX and SASS; the default keeps IEEE f32 exactly as before; bad values are refused.

f32 matmul groups run on the Hopper GEMM only when the module asks for tf32 maths
(``fusec.compile(..., precision="tf32")`` records ``fusec.precision`` on the module): the
tile holds 32 f32 values per 128-byte row (BK = 32) and wgmma reads them as tf32 (k8). A B
stored K x N is copied K-major first (``aux.TransposeF32``). The GPU tests are in
``test_gemm_tf32_gpu.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gemm_model as model
import numpy as np
import pytest
from test_gemm_build import clean_sass, needs_toolchain, needs_toolchain_in_the_default_lane

import fusec
from fusec.dialect import ops as ai
from fusec.errors import FusecError
from fusec.targets.cuda.gemm import aux, cpp
from fusec.targets.cuda.gemm import template as gemm_template
from fusec.targets.cuda.gemm.config import TileConfig, as_tf32, from_attr, to_attr

pytestmark = pytest.mark.requires_target("cuda")

ROOT = Path(__file__).resolve().parents[3]


def matmul_ir(m: int, n: int, k: int, *, tb: bool, dtype: str = "f32", batch=()) -> str:
    """[batch] A (M x K) @ B (N x K with ``tb``, else K x N) + bias -> relu."""
    shape = lambda *dims: f"tensor<{'x'.join(str(d) for d in dims)}x{dtype}>"  # noqa: E731
    a, b = shape(*batch, m, k), shape(n, k) if tb else shape(k, n)
    o = shape(*batch, m, n)
    attr = " {transpose_b = true}" if tb else ""
    return f"""func.func @g(%a: {a}, %b: {b}, %c: {shape(n)}) -> {o} {{
  %v0 = ai.matmul %a, %b{attr} : {a} * {b}
  %v1 = ai.bias_add %v0, %c : {o} * {shape(n)}
  %v2 = ai.relu %v1 : {o}
  return %v2 : {o}
}}
"""


def _gemm_kernel(compiled):
    (kernel,) = [k for k in compiled.kernels if k.kind == "matmul"]
    return kernel


def _fused(compiled) -> ai.FusedOp:
    return next(op for op in compiled.module.walk() if isinstance(op, ai.FusedOp))


# ------------------------------------------------------------------ the default: IEEE f32
def test_default_precision_keeps_f32_matmul_on_the_ieee_fallback() -> None:
    """Without precision=, an f32 matmul group plans as before (the fallback's reason) and
    its module runs the IEEE helpers: nothing of tf32 in the IR or the kernel."""
    text = matmul_ir(256, 192, 128, tb=True)
    for compiled in (
        fusec.compile(text, target="cuda", executable=False),
        fusec.compile(text, target="cuda", executable=False, precision="ieee"),
    ):
        assert "fusec.precision" not in compiled.ir
        kernel = _gemm_kernel(compiled)
        assert "GemmLaunch" not in kernel.source and "ieee_matmul(torch," in kernel.source
        assert "FALLBACK" in kernel.source and "tf32" not in kernel.source
        plan = gemm_template.plan(_fused(compiled))
        assert plan == "operands f32 x f32: the Tensor Core kernel takes f16 or bf16"


def test_16bit_kernels_do_not_change_with_tf32() -> None:
    """precision="tf32" concerns f32 operands only: an f16 GEMM's module is the same text."""
    text = matmul_ir(256, 192, 128, tb=False, dtype="f16")
    plain = _gemm_kernel(fusec.compile(text, target="cuda", executable=False))
    tf32 = _gemm_kernel(fusec.compile(text, target="cuda", executable=False, precision="tf32"))
    assert plain.source == tf32.source
    assert plain.extra_sources == tf32.extra_sources


# ---------------------------------------------------------------------- tf32 plans
@pytest.mark.parametrize("tb", [True, False], ids=["b-k-major", "b-n-major"])
def test_tf32_f32_matmul_is_the_tensor_core_gemm(tb: bool) -> None:
    compiled = fusec.compile(
        matmul_ir(256, 192, 136, tb=tb), target="cuda", executable=False, precision="tf32"
    )
    assert 'fusec.precision = "tf32"' in compiled.ir
    kernel = _gemm_kernel(compiled)
    assert "GemmLaunch" in kernel.source and "FALLBACK" not in kernel.source
    assert "# precision: tf32" in kernel.source  # the --emit kernels header says it
    plan = gemm_template.plan(_fused(compiled))
    assert not isinstance(plan, str) and plan.tf32
    specs = {type(s).__name__: s for s in kernel.specs}
    gemm = specs["GemmSpec"]
    assert gemm.dtype == "f32" and gemm.config.tf32 and gemm.config.bk == 32
    assert (gemm.a_major, gemm.b_major) == ("k", "k")
    assert "tile 64x128x32" in kernel.source or "x32 s" in kernel.source
    assert 'mma = "m64n' in compiled.ir and "k8" in compiled.ir  # fusec.tile's instruction
    # a B stored K x N is copied K-major first, into the scratch buffer "bt"
    assert ("TransposeF32" in specs) == (not tb)
    assert ("b=('bt', 192, 136, 1)" in kernel.source) == (not tb)
    assert "k8.f32.tf32.tf32" in gemm.cpp_source()


def test_tf32_is_in_the_kernel_cache_key() -> None:
    """The same f32 graph gives another module text (the cache key) under tf32."""
    text = matmul_ir(256, 192, 128, tb=True)
    ieee = _gemm_kernel(fusec.compile(text, target="cuda", executable=False))
    tf32 = _gemm_kernel(fusec.compile(text, target="cuda", executable=False, precision="tf32"))
    assert ieee.source != tf32.source


def test_tf32_module_attribute_in_the_ir_is_honoured() -> None:
    """The precision is the module's: IR text that carries it compiles as tf32."""
    text = 'module attributes {fusec.precision = "tf32"} {\n' + matmul_ir(128, 64, 64, tb=True)
    compiled = fusec.compile(text + "}\n", target="cuda", executable=False)
    assert "GemmLaunch" in _gemm_kernel(compiled).source


def test_tf32_transposed_a_is_copied_k_major() -> None:
    """An A stored K x M (transpose_a) and a B stored K x N: both read from K-major copies."""
    ta = """func.func @g(%a: tensor<64x128xf32>, %b: tensor<64x96xf32>) -> tensor<128x96xf32> {
  %v = ai.matmul %a, %b {transpose_a = true} : tensor<64x128xf32> * tensor<64x96xf32>
  return %v : tensor<128x96xf32>
}
"""
    compiled = fusec.compile(ta, target="cuda", executable=False, precision="tf32")
    kernel = _gemm_kernel(compiled)
    assert "GemmLaunch" in kernel.source
    assert "a=('at', 128, 64, 1), b=('bt', 96, 64, 1)" in kernel.source
    assert "TransposeF32(), 0, 'at'), Transpose(TransposeF32(), 1, 'bt')" in kernel.source
    assert "tf32 A stored K x M: copied K-major" in kernel.source
    gemm = next(s for s in kernel.specs if isinstance(s, cpp.GemmSpec))
    assert (gemm.a_major, gemm.b_major) == ("k", "k")


def test_tf32_layernorm_prologue_stays_a_kernel_of_its_own() -> None:
    """The LayerNorm prologue normalises 16-bit tiles: an f32 one is not fused into the tf32
    GEMM (fusion asks the plan), which then runs the matmul alone."""
    ln = """func.func @g(%x: tensor<256x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>,
                     %w: tensor<64x96xf32>) -> tensor<256x96xf32> {
  %n = ai.layernorm %x, %g, %b : tensor<256x64xf32> * tensor<64xf32> * tensor<64xf32>
  %v = ai.matmul %n, %w : tensor<256x64xf32> * tensor<64x96xf32>
  return %v : tensor<256x96xf32>
}
"""
    compiled = fusec.compile(ln, target="cuda", executable=False, precision="tf32")
    kinds = [k.kind for k in compiled.kernels]
    assert kinds[-1] == "matmul" and len(kinds) == 2
    assert "GemmLaunch" in compiled.kernels[-1].source
    ops = [op for op in compiled.module.walk() if isinstance(op, ai.LayerNormOp | ai.MatmulOp)]
    layernorm, matmul = ops
    assert gemm_template._tf32_problem(matmul, None) is None
    problem = gemm_template._tf32_problem(matmul, layernorm)
    assert problem == "precision=tf32: a LayerNorm prologue of f32 operands"


def test_tf32_tile_configs() -> None:
    config = as_tf32(TileConfig())
    assert config.text == "128x256x32 s4 c2 g8" and config.tf32 and config.mma_k == 8
    assert TileConfig.parse(config.text) == config
    assert (config.a_stage_bytes, config.b_stage_bytes) == (128 * 128, 256 * 128)
    assert config.smem_bytes == TileConfig().smem_bytes  # the same bytes per stage
    attr = to_attr(config, "heuristic")
    assert attr.data["mma"].data == "m64n256k8"
    assert from_attr(attr) == config
    with pytest.raises(ValueError, match="ln=tile normalises 16-bit"):
        TileConfig(64, 128, 32, 4, 1, 8, ln="tile")
    with pytest.raises(ValueError, match="come together"):  # f32 operands need the tf32 tile
        cpp.GemmSpec(TileConfig(), "f32", "f32", "k", "k")
    with pytest.raises(ValueError, match="K-major"):
        cpp.GemmSpec(config, "f32", "f32", "k", "n")


def test_tf32_forced_tile_is_fitted_to_the_operands() -> None:
    """A tile forced by the pass option (written for 16-bit, BK = 64) takes BK = 32 on a
    tf32 group."""
    pipeline = 'fusec-default,tile-gemm{tile="128x128x64 s6 c2 g8"}'
    compiled = fusec.compile(
        matmul_ir(512, 512, 256, tb=True),
        target="cuda",
        executable=False,
        precision="tf32",
        pipeline=pipeline,
    )
    assert "tile 128x128x32 s6 c2 g8" in _gemm_kernel(compiled).source


@pytest.mark.parametrize(
    "config, shape",
    [
        (as_tf32(TileConfig(64, 128, 64, 8, 1, 8)), (1, 200, 77, 130)),
        (as_tf32(TileConfig(128, 256, 64, 4, 2, 8, epilogue="smem")), (2, 300, 100, 260)),
    ],
)
def test_tf32_tile_model_writes_every_element_once(config, shape) -> None:
    """The block program's tile walk with 32-deep K steps (ragged K zero-filled by TMA)."""
    batches, m, k, n = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batches, m, k)).astype(np.float32)
    b = rng.standard_normal((batches, k, n)).astype(np.float32)
    out, writes = model.run(config, a, b, grid=5, out_dtype="f32")
    assert (writes == 1).all()
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- bad precision values
@pytest.mark.parametrize("value", ["fp32", "TF32", "", None, 32])
def test_bad_precision_is_a_clear_error(value) -> None:
    with pytest.raises(FusecError, match=r"precision=.* is not a precision: use 'ieee'"):
        fusec.compile(matmul_ir(64, 64, 64, tb=True), target="reference", precision=value)


def test_bad_precision_attribute_is_a_clear_error() -> None:
    text = 'module attributes {fusec.precision = "fast"} {\n' + matmul_ir(64, 64, 64, tb=True)
    with pytest.raises(FusecError, match="fusec.precision attribute: precision='fast'") as info:
        fusec.compile(text + "}\n", target="cuda", executable=False)
    assert info.value.location is not None and info.value.location.line == 1
    assert "'builtin.module' op has a bad" in str(info.value)


def test_cli_precision_option() -> None:
    """``fusec compile --precision tf32`` writes the tf32 kernel; another value is a usage
    error (exit 2) naming the option and its choices."""
    path = ROOT / "examples" / "conv_bias_relu.mlir"
    run = [sys.executable, "-m", "fusec.cli", "compile", str(path), "--target", "reference"]
    bad = subprocess.run([*run, "--precision", "half"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "--precision: invalid choice: 'half'" in bad.stderr and "'tf32'" in bad.stderr


def test_cli_precision_tf32_kernel_header(tmp_path: Path) -> None:
    from fusec import cli

    graph = tmp_path / "g.mlir"
    graph.write_text(matmul_ir(128, 64, 64, tb=True))
    out = tmp_path / "k.txt"
    argv = ["compile", str(graph), "--target", "cuda", "--emit", "kernels", "-o", str(out)]
    assert cli.main([*argv, "--precision", "tf32"]) == 0
    assert "# precision: tf32" in out.read_text()
    assert cli.main(argv) == 0
    assert "precision" not in out.read_text()


def test_reference_target_accepts_tf32_and_computes_ieee() -> None:
    """The reference target takes precision="tf32" and ignores it (README: only the cuda
    target runs tf32)."""
    text = matmul_ir(32, 24, 40, tb=True)
    rng = np.random.default_rng(1)
    args = [
        rng.standard_normal((32, 40)).astype(np.float32),
        rng.standard_normal((24, 40)).astype(np.float32),
        rng.standard_normal(24).astype(np.float32),
    ]
    got = fusec.compile(text, target="reference", precision="tf32")(*args)
    want = fusec.compile(text, target="reference")(*args)
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_cpu_target_accepts_tf32_and_computes_ieee() -> None:
    text = matmul_ir(32, 24, 40, tb=False)
    rng = np.random.default_rng(2)
    args = [
        rng.standard_normal((32, 40)).astype(np.float32),
        rng.standard_normal((40, 24)).astype(np.float32),
        rng.standard_normal(24).astype(np.float32),
    ]
    out = np.full((32, 24), np.nan, dtype=np.float32)
    out[...] = fusec.compile(text, target="cpu", precision="tf32")(*args)
    want = np.maximum(args[0].astype(np.float64) @ args[1] + args[2], 0.0)
    rel = np.linalg.norm(out - want) / np.linalg.norm(want)
    assert not np.isnan(out).any() and rel < 1e-5  # IEEE f32, not tf32 (~1e-3)


# -------------------------------------------------------------------- PTX and SASS
def _tf32_specs(tb: bool) -> dict:
    compiled = fusec.compile(
        matmul_ir(600, 200, 136, tb=tb),
        target="cuda",
        executable=False,
        precision="tf32",
    )
    return {type(s).__name__: s for s in _gemm_kernel(compiled).specs}


@needs_toolchain_in_the_default_lane
def test_tf32_gemm_ptx_has_the_tf32_wgmma() -> None:
    from fusec.targets.cuda import build

    gemm = _tf32_specs(tb=True)["GemmSpec"]
    ptx = build.ptx(gemm)
    assert ".target sm_90a" in ptx
    found = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k\d+\.\S+", ptx))
    assert found == {f"wgmma.mma_async.sync.aligned.m64n{gemm.config.bn}k8.f32.tf32.tf32"}


@needs_toolchain
@pytest.mark.parametrize("tb", [True, False], ids=["b-k-major", "b-n-major"])
def test_tf32_cubins_are_clean(tb: bool, tmp_path) -> None:
    """The GEMM's SASS runs HGMMA ...x8.F32.TF32 on TMA loads, no spills, no local memory;
    the transpose of a K x N B is a plain shared-memory kernel."""
    specs = _tf32_specs(tb)
    gemm = specs["GemmSpec"]
    sass = clean_sass(gemm, tmp_path)
    hgmma = re.findall(r"HGMMA\.64x(\d+)x(\d+)\.F32\.TF32", sass)
    assert hgmma and set(hgmma) == {(str(gemm.config.bn), "8")}
    assert "UTMALDG" in sass and not re.search(r"HGMMA\.\S+\.F16", sass)
    if not tb:
        transpose = specs["TransposeF32"]
        assert isinstance(transpose, aux.TransposeF32)
        sass = clean_sass(transpose, tmp_path)
        assert "LDS" in sass and "STS" in sass and "CALL" not in sass


def test_run_check_tolerance_of_tf32_results() -> None:
    """``fusec run --check`` holds f32 results of a tf32 cuda program to 1e-2 (tf32 keeps 10
    mantissa bits), others to f32's 1e-4: a result 1e-3 off passes only the former."""
    from fusec.api import parse
    from fusec.tools import runner

    fn = next(iter(parse(matmul_ir(16, 8, 8, tb=True)).ops))
    want = np.random.default_rng(3).standard_normal((16, 8)) + 2.0
    got = (want * (1 + 1e-3)).astype(np.float32)
    (ieee,) = runner.compare(fn, [got], ("program", [want]))
    (tf32,) = runner.compare(fn, [got], ("program", [want]), tf32=True)
    assert not ieee.passed and tf32.passed
    assert tf32.errors[0][1] == runner.TF32_TOLERANCE == 1e-2


def test_cli_run_takes_precision(tmp_path: Path, capsys) -> None:
    from fusec import cli

    graph = tmp_path / "g.mlir"
    graph.write_text(matmul_ir(32, 16, 24, tb=True))
    argv = ["run", str(graph), "--random-inputs", "--check", "--target", "reference"]
    assert cli.main([*argv, "--precision", "tf32"]) == 0  # the reference computes IEEE f32
    assert "PASS" in capsys.readouterr().out


def test_tf32_constant_b_is_transposed_at_compile_time() -> None:
    """A weight constant stored K x N, read by one tf32 group, becomes the N x K constant read
    transpose_b (tile-gemm): no transpose launch per call, and the IR computes the same."""
    from fusec.runtime.reference import run_reference

    rng = np.random.default_rng(4)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    rows = ", ".join("[" + ", ".join(f"{v!r}" for v in row.tolist()) + "]" for row in w)
    text = f"""func.func @g(%a: tensor<64x24xf32>) -> tensor<64x40xf32> {{
  %w = arith.constant dense<[{rows}]> : tensor<24x40xf32>
  %c = ai.matmul %a, %w : tensor<64x24xf32> * tensor<24x40xf32>
  %r = ai.relu %c : tensor<64x40xf32>
  return %r : tensor<64x40xf32>
}}
"""
    compiled = fusec.compile(text, target="cuda", executable=False, precision="tf32")
    kernel = _gemm_kernel(compiled)
    assert "Transpose" not in kernel.source and "b=(1, 40, 24, 1)" in kernel.source
    assert "tensor<40x24xf32>" in compiled.ir and "transpose_b = true" in compiled.ir
    a = rng.standard_normal((64, 24)).astype(np.float32)
    (got,) = run_reference(compiled.module, [a])
    np.testing.assert_allclose(got, np.maximum(a.astype(np.float64) @ w, 0), rtol=1e-12)
    # the default keeps the constant as written
    assert "tensor<40x24xf32>" not in fusec.compile(text, target="cuda", executable=False).ir
