"""Generated cpu kernel modules import one fusec module: ``fusec.targets.cpu.abi``.

Every example, golden and ONNX model graph is compiled for the cpu target
(``executable=False``: the kernels are generated, nothing runs) and each kernel
module's imports are read from its syntax tree: a ``fusec`` import other than
names of the ABI fails, as does a dynamic import. The ABI's names all resolve.
The ONNX models run in the slow lane (seconds each to import and plan).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import fusec
from fusec.api import import_onnx
from fusec.targets.cpu import abi

ROOT = Path(__file__).resolve().parents[3]
GRAPHS = sorted(ROOT.glob("examples/*.mlir")) + sorted(
    p for p in ROOT.glob("tests/passes/golden/**/*.mlir") if not p.name.endswith(".expected.mlir")
)
MODELS = ROOT / "tests" / "frontend" / "onnx" / "models"

#: Imports a kernel kind may still make besides the ABI's (none: the copy template moved
#: to ``from fusec.targets.cpu.abi import numpy_ops as K`` too).
TOLERATED: dict[str, set[tuple[str, str]]] = {}


def fusec_imports(source: str) -> list[tuple[str, str]]:
    """(module, name) of every import of a fusec module in ``source`` (``import fusec.x``
    gives ``("fusec.x", "")``); a relative or dynamic import is an error."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.split(".")[0] == "fusec"]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import in a generated module: line {node.lineno}"
            module = node.module or ""
            if module.split(".")[0] == "fusec":
                found += [(module, a.name) for a in node.names]
        elif isinstance(node, ast.Name) and node.id in ("__import__", "importlib"):
            raise AssertionError(f"dynamic import in a generated module: line {node.lineno}")
    return found


def foreign_imports(kernel, tolerated=TOLERATED) -> list[tuple[str, str]]:
    """The kernel's fusec imports that are not names of the ABI (nor tolerated)."""
    allowed = set(abi.names())
    return [
        (module, name)
        for module, name in fusec_imports(kernel.source)
        if not (module == abi.MODULE and name in allowed)
        and (module, name) not in tolerated.get(kernel.kind, set())
    ]


def check_kernels(kernels) -> None:
    assert kernels, "no cpu kernels generated"
    for kernel in kernels:
        foreign = foreign_imports(kernel)
        assert not foreign, f"{kernel.name} ({kernel.kind}) imports {foreign}"


COPY_GRAPH = """
func.func @f(%x: tensor<4x6xf32>, %i: tensor<3xi64>) -> (tensor<6x4xf32>, tensor<3x6xf32>) {
  %t = ai.transpose %x {perm = array<i64: 1, 0>} : tensor<4x6xf32>
  %g = ai.take %x, %i {axis = 0 : i64} : tensor<4x6xf32> * tensor<3xi64>
  return %t, %g : tensor<6x4xf32>, tensor<3x6xf32>
}
"""


def test_copy_kernels_import_only_the_abi() -> None:
    kernels = fusec.compile(COPY_GRAPH, target="cpu", executable=False).kernels
    copies = [k for k in kernels if k.kind == "copy"]
    assert copies, [k.kind for k in kernels]
    for kernel in copies:
        assert not foreign_imports(kernel, tolerated={}), kernel.source


def test_every_abi_name_resolves() -> None:
    for name in abi.names():
        assert getattr(abi, name) is not None, name
    import numpy as np

    assert abi.numpy_ops.__name__ == "fusec.dialect.numpy_ops"
    assert abi.workspace(3).dtype == np.float32


def test_names_outside_the_abi_are_refused() -> None:
    with pytest.raises(AttributeError, match="not part of the cpu kernel ABI"):
        abi.__getattr__("sgemm")
    with pytest.raises(ImportError):
        exec("from fusec.targets.cpu.abi import ROW_HELPERS", {})  # noqa: S102
    with pytest.raises(KeyError, match="not part of the cpu kernel ABI"):
        abi.import_line("next_block", "pack_strips")
    assert abi.import_line("sgemm_lp64 as sgemm") == (
        "from fusec.targets.cpu.abi import sgemm_lp64 as sgemm"
    )


def test_the_checker_finds_foreign_imports() -> None:
    source = (
        "import numpy as np\n"
        "from fusec.targets.cpu.abi import cached_njit\n"
        "from fusec.targets.cpu.tasks import next_block\n"
        "import fusec.runtime.numba_cache\n"
    )
    assert fusec_imports(source) == [
        ("fusec.targets.cpu.abi", "cached_njit"),
        ("fusec.targets.cpu.tasks", "next_block"),
        ("fusec.runtime.numba_cache", ""),
    ]
    with pytest.raises(AssertionError, match="dynamic import"):
        fusec_imports("m = __import__('fusec.targets.cpu.tasks')\n")


#: Golden graphs the cpu target refuses, and the op it names: none since the cpu target
#: computes ai.quantize and ai.dequantize (issue 31; quantize.mlir compiles for cpu).
CPU_REFUSED: dict[str, str] = {}


def test_generated_modules_import_only_the_abi() -> None:
    """One test over every example and golden graph (~0.05 s each): the default lane's
    budget counts a test, not a graph."""
    for path in GRAPHS:
        if path.name in CPU_REFUSED:
            with pytest.raises(fusec.FusecError, match=f"'{CPU_REFUSED[path.name]}' op cannot run"):
                fusec.compile(path, target="cpu", executable=False)
            continue
        kernels = fusec.compile(path, target="cpu", executable=False).kernels
        assert kernels, f"{path.relative_to(ROOT)}: no cpu kernels"
        for kernel in kernels:
            foreign = foreign_imports(kernel)
            assert not foreign, f"{path.relative_to(ROOT)}: {kernel.name} imports {foreign}"


def _models() -> list[tuple[str, str, tuple[int, ...]]]:
    manifest = json.loads((MODELS / "manifest.json").read_text())["models"]
    return [
        (entry["file"], info["input"], tuple(info["example_shape"]))
        for info in manifest.values()
        for entry in info["files"].values()
    ]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("file, name, shape", _models(), ids=lambda v: str(v))
def test_onnx_model_modules_import_only_the_abi(file: str, name: str, shape) -> None:
    path = MODELS / file
    if not path.exists():
        pytest.skip(f"{path} is missing (regenerate: tests/frontend/onnx/models/export_models.py)")
    module = import_onnx(path, input_shapes={name: shape}).module
    check_kernels(fusec.compile(module, target="cpu", executable=False).kernels)
