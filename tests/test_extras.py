"""Commands that need an optional extra say which one, in one line, with exit status 1.

The absence of a package is simulated in a fresh interpreter by setting
``sys.modules[name] = None`` before anything imports it: ``import name`` then
fails and ``importlib.util.find_spec(name)`` answers None, exactly as on a
plain ``pip install fusec``. With ``numba_cuda`` hidden, numba's
``_numba_cuda_redirector`` gives up and ``numba.cuda`` is numba's own old
built-in module, which is what fooled the availability check before.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"


def run_without(hidden: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"for name in {hidden!r}:\n"
        "    sys.modules[name] = None\n"
        "from fusec.cli import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], extra: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert f"pip install 'fusec[{extra}]'" in lines[0], lines[0]
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


def test_conformance_without_onnx_names_the_onnx_extra():
    proc = run_without(("onnx",), "conformance", "--op", "Relu")
    assert_one_line_error(proc, "onnx")
    assert "fusec conformance needs onnx" in proc.stderr


def test_import_without_onnx_names_the_onnx_extra(tmp_path: Path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not read")
    proc = run_without(("onnx",), "import", str(model))
    assert_one_line_error(proc, "onnx")


@pytest.mark.parametrize("example", ["elementwise_chain.mlir", "conv_bias_relu.mlir"])
def test_emit_ptx_without_numba_cuda_names_the_cuda_extra(example: str):
    """Also for a graph whose groups all use the PyTorch fallback: the answer must not
    depend on the graph."""
    proc = run_without(("numba_cuda",), "compile", str(EXAMPLES / example), "--emit", "ptx")
    assert_one_line_error(proc, "cuda")
    assert "numba-cuda is not installed" in proc.stderr
    assert proc.stdout == ""


def test_the_builtin_numba_cuda_module_is_not_taken_for_numba_cuda():
    """The probe itself, where numba's deprecated ``numba.cuda`` imports fine."""
    code = (
        "import sys\n"
        "sys.modules['numba_cuda'] = None\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "import numba.cuda\n"  # the built-in module: imports without error
        "from fusec.targets.cuda.env import numba_cuda_problem\n"
        "print(numba_cuda_problem())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "numba-cuda is not installed"


def test_a_cuda_target_without_numba_cuda_names_the_cuda_extra():
    proc = run_without(
        ("numba_cuda",),
        "run",
        str(EXAMPLES / "elementwise_chain.mlir"),
        "--random-inputs",
        "--target",
        "cuda",
    )
    assert_one_line_error(proc, "cuda")


@pytest.mark.parametrize("example", ["mlp_block.mlir", "conv_bias_relu.mlir", "w4a16"])
def test_kernel_source_without_numba_cuda(example: str, tmp_path: Path):
    """Planning and generating cuda kernels (``--emit kernels``) needs no numba-cuda: only
    running them or their PTX does. A template module that imported a device-helper module
    (those import numba.cuda at load) would break this, as gemm/w4.py once did."""
    path = EXAMPLES / example
    if example == "w4a16":
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            import onnx
            from w4_cases import w4a16_onnx
        finally:
            sys.path.pop(0)
        model, _ = w4a16_onnx(1, 256, 64, 32, "bf16", seed=1)
        path = tmp_path / "w4a16.onnx"
        onnx.save(model, path)
    proc = run_without(
        ("numba_cuda",), "compile", str(path), "--target", "cuda", "--emit", "kernels"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("// ===== kernel k0")
    if example == "w4a16":
        assert "weight-only int4 route" in proc.stdout
