"""The ``tile-gemm`` pass, ``fusec tune`` records, ``--emit cuda``/``--emit ptx`` of GEMM groups.

The ``filecheck/*.mlir`` files carry ``// RUN: fusec compile %s ... | filecheck %s``
lines (lit's syntax); each RUN line is one test case here: fusec runs in this
process (``fusec.cli.main``) and its output goes to the ``filecheck`` tool.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_gemm_build import needs_toolchain_in_the_default_lane

from fusec.cli import main

HERE = Path(__file__).parent / "filecheck"
RUN_LINES = [
    (path, line.split("RUN:", 1)[1].strip())
    for path in sorted(HERE.glob("*.mlir"))
    for line in path.read_text().splitlines()
    if line.startswith("// RUN:")
]


def _filecheck() -> str | None:
    found = Path(sys.executable).parent / "filecheck"
    return str(found) if found.exists() else shutil.which("filecheck")


def _fusec(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "path, run", RUN_LINES, ids=[f"{p.stem}:{k}" for k, (p, _) in enumerate(RUN_LINES)]
)
def test_filecheck(path: Path, run: str) -> None:
    tool = _filecheck()
    if tool is None:
        pytest.skip("the filecheck tool is not installed (pip install filecheck)")
    producer, consumer = (part.strip() for part in run.split("|"))
    argv = [str(path) if word == "%s" else word for word in shlex.split(producer)]
    assert argv[0] == "fusec"
    code, output, err = _fusec(argv[1:])
    assert code == 0, err
    check = [
        tool if w == "filecheck" else str(path) if w == "%s" else w for w in shlex.split(consumer)
    ]
    result = subprocess.run(check, input=output, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + "\n--- fusec output ---\n" + output


def test_tuned_record_wins_over_the_heuristic(tmp_path, monkeypatch) -> None:
    import fusec
    from fusec.dialect import ops as ai
    from fusec.targets.cuda.caps import current_device
    from fusec.targets.cuda.gemm import template, tuning
    from fusec.targets.cuda.gemm.config import TileConfig

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    path = HERE / "tile_gemm_4096.mlir"
    compiled = fusec.compile(path, target="cuda", executable=False)
    (group,) = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    key = tuning.problem_key(group, template.plan(group), current_device())
    tuning.record(key, TileConfig(256, 128, 64, 4, 2, 8), {"256x128x64 s4 c2 g8": 0.2})
    again = fusec.compile(path, target="cuda", executable=False, tuned=True)
    assert "block = array<i64: 256, 128, 64>" in again.ir and 'choice = "tuned"' in again.ir
    tuned = fusec.compile(path, target="reference", pipeline="fusec-default,tile-gemm{tuned=true}")
    assert 'choice = "tuned"' in tuned.ir
    # the records are an explicit input: without it the pass does not read them
    untuned = fusec.compile(path, target="cuda", executable=False)
    assert 'choice = "heuristic"' in untuned.ir and untuned.ir == compiled.ir


BAD_TILE = """func.func @f(%a: tensor<256x256xf16>, %b: tensor<256x256xf16>) -> tensor<256x256xf16> {
  %r = ai.fused "matmul" (%a, %b) {fusec.tile = {block = array<i64: 128, 512, 64>, stages = 4 : i64, consumers = 2 : i64, group_m = 8 : i64}} : (tensor<256x256xf16>, tensor<256x256xf16>) -> tensor<256x256xf16> {
  ^bb0(%x: tensor<256x256xf16>, %y: tensor<256x256xf16>):
    %c = ai.matmul %x, %y : tensor<256x256xf16> * tensor<256x256xf16>
    ai.yield %c : tensor<256x256xf16>
  }
  return %r : tensor<256x256xf16>
}
"""  # noqa: E501


def test_bad_tile_attribute_is_a_located_error(tmp_path) -> None:
    path = tmp_path / "bad.mlir"
    path.write_text(BAD_TILE)
    code, _, err = _fusec(["compile", str(path), "--pipeline", "infer-shapes", "--emit", "cuda"])
    assert code == 1
    assert f"{path}:2:" in err and "fusec.tile" in err and "bn must be" in err
    assert "Traceback" not in err


def test_emit_cuda_prints_the_generated_cpp_without_a_gpu() -> None:
    code, out, err = _fusec(["compile", str(HERE / "tile_gemm_row_softmax.mlir"), "--emit", "cuda"])
    assert code == 0, err
    assert out.count('extern "C" __device__') == 1  # the GEMM normalises its A rows itself
    assert "LN_TILE = 1," in out  # ln=tile: the GEMM normalises its resident A tiles
    assert "fs_fence_async_smem();  // the generic-proxy writes" in out
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in out
    assert "__shfl_xor_sync" in out and "float post(float s" in out


@needs_toolchain_in_the_default_lane  # the linked Tensor Core GEMM's path
def test_emit_ptx_links_the_gemm_for_sm90a() -> None:
    code, out, err = _fusec(
        ["compile", str(HERE / "tile_gemm_1024.mlir"), "--emit", "ptx", "--arch", "sm_90a"]
    )
    assert code == 0, err
    assert ".target sm_90a" in out and "wgmma.mma_async.sync.aligned.m64n128k16" in out
    assert ".entry" in out and "\x00" not in out
    code, _, err = _fusec(
        ["compile", str(HERE / "tile_gemm_1024.mlir"), "--emit", "ptx", "--arch", "sm_80"]
    )
    assert code == 1 and "sm_90a" in err


def test_tune_without_a_gpu_says_so() -> None:
    code, _, err = _fusec(["tune", str(HERE / "tile_gemm_4096.mlir")])
    assert code == 1 and "needs a usable NVIDIA GPU" in err


def test_remark_says_why_a_long_layernorm_is_a_kernel_of_its_own() -> None:
    path = HERE / "tile_gemm_long_softmax.mlir"
    code, _, err = _fusec(["compile", str(path), "--target", "cuda", "--remarks"])
    assert code == 0
    assert re.search(
        r"tile_gemm_long_softmax.mlir:(\d+):3: remark: ai.matmul not fused with its producer "
        r"ai.layernorm \((\d+):3\): the cuda Tensor Core GEMM leaves a LayerNorm over "
        r"K = 4096 to a kernel of its own: its output is N = 4096 >= K wide",
        err,
    )


def test_forced_rolled_tile_on_a_layernorm_group_is_a_located_error() -> None:
    path = HERE / "tile_gemm_rolled.mlir"
    tile = "64x256x64 s5 c1 g8 epi=smem math=fast ln=tile loop=rolled"
    pipeline = f'fusec-default,tile-gemm{{tile="{tile}"}}'
    argv = ["compile", str(path), "--entry", "ln_softmax", "--target", "cuda", "--emit", "cuda"]
    code, _, err = _fusec([*argv, "--pipeline", pipeline])
    assert code == 1
    lines = path.read_text().splitlines()
    line = next(k for k, text in enumerate(lines, 1) if "ai.matmul %n, %w" in text)
    assert f"{path}:{line}:3:" in err and "loop=rolled" in err and "LayerNorm prologue" in err
    assert "Traceback" not in err
