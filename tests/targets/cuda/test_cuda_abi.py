"""Generated cuda kernel modules import one fusec module: ``fusec.targets.cuda.abi``.

Every example, golden and cuda FileCheck graph is compiled for the cuda target
(``executable=False``: the modules are generated, nothing is built or run, no GPU is
needed) and each kernel module's imports are read from its syntax tree
(``tests.targets.cpu.test_cpu_abi.fusec_imports``): a ``fusec`` import other than a name of
the ABI fails, as does a dynamic or relative one, and every kernel (the linked ones' Numba
wrappers too, unless the C++ body waits itself: a GEMM loading constant weights early) must
begin with ``grid_dependency_wait()``. The linked kernels' specs travel with
the ``KernelSource`` as data (``specs``), so nothing runs a module to find them. The ONNX
models run in the slow lane (seconds each to import and plan).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fusec
from fusec.api import import_onnx
from tests.targets.cpu.test_cpu_abi import _models, fusec_imports

pytestmark = pytest.mark.requires_target("cuda")

ROOT = Path(__file__).resolve().parents[3]
GRAPHS = [
    p
    for pattern in (
        "examples/*.mlir",
        "tests/passes/golden/*.mlir",
        "tests/targets/cuda/filecheck/*.mlir",
    )
    for p in sorted(ROOT.glob(pattern))
    if not p.name.endswith(".expected.mlir")
]
MODELS = ROOT / "tests" / "frontend" / "onnx" / "models"
#: The kinds whose kernels are linked C++ (their specs travel with the KernelSource).
LINKED_KINDS = {"matmul", "conv", "attention", "copy"}


def foreign_imports(kernel: fusec.Kernel) -> list[tuple[str, str]]:
    """The kernel's fusec imports that are not names of the cuda ABI."""
    from fusec.targets.cuda import abi

    allowed = set(abi.names())
    return [
        (module, name)
        for module, name in fusec_imports(kernel.source)
        if not (module == abi.MODULE and name in allowed)
    ]


def _compile(path: Path) -> list[fusec.Kernel] | None:
    """The cuda kernels of ``path``'s graph, None when its text is not a whole graph the
    cuda target compiles (a FileCheck input of a pass alone, an op cuda refuses)."""
    try:
        return list(fusec.compile(path, target="cuda", executable=False).kernels)
    except fusec.FusecError:
        return None


def kernel_first_calls(source: str) -> dict[str, str | None]:
    """The name each ``@cuda.jit`` kernel of module ``source`` calls first (after its
    docstring), None when its first statement is not a call."""
    firsts: dict[str, str | None] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        decorators = [ast.unparse(d) for d in node.decorator_list]
        if not any(d.startswith("cuda.jit") and "device=True" not in d for d in decorators):
            continue  # (a device function runs inside a kernel that waited)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        first = body[0] if body else None
        call = first.value if isinstance(first, ast.Expr) else None
        firsts[node.name] = ast.unparse(call.func) if isinstance(call, ast.Call) else None
    return firsts


def check_kernels(kernels: list[fusec.Kernel], where: str) -> set[str]:
    """Fail on a foreign import, a spec without C++ or a kernel whose first statement is not
    the wait for the kernels before it (``fusec.targets.cuda.dependent``: a graph edge into
    it may be programmatic); the kinds seen."""
    from fusec.targets.cuda.build import python_source

    for kernel in kernels:
        foreign = foreign_imports(kernel)
        assert not foreign, f"{where}: {kernel.name} ({kernel.kind}) imports {foreign}"
        wrappers = [python_source(s, "<cu>") for s in kernel.specs if not s.waits_in_body]
        for source in (kernel.source, *wrappers):
            for name, first in kernel_first_calls(source).items():
                assert first == "grid_dependency_wait", (where, kernel.name, name, first)
        for spec in kernel.specs:  # (the C++ waits: test_dependent.py checks its PTX)
            early = ("EARLY_B = 1" in spec.cpp_source()) or ("EARLY_W = 1" in spec.cpp_source())
            assert not spec.waits_in_body or early, where
        for spec in kernel.specs:
            assert kernel.kind in LINKED_KINDS, (where, kernel.name, kernel.kind)
            assert ("cuda-c++", spec.cpp_source()) in kernel.extra_sources, (where, kernel.name)
    return {k.kind + ("+linked" if k.specs else "") for k in kernels}


def test_generated_modules_import_only_the_abi() -> None:
    """One test over every graph: the default lane's budget counts a test, not a graph."""
    kinds: set[str] = set()
    compiled = 0
    for path in GRAPHS:
        kernels = _compile(path)
        if kernels is None:
            continue
        compiled += 1
        kinds |= check_kernels(kernels, str(path.relative_to(ROOT)))
    assert compiled >= 20, compiled
    # the graphs reach every linked template and the Numba ones
    expected = {"matmul+linked", "conv+linked", "attention+linked", "copy+linked"}
    assert expected <= kinds, sorted(kinds)
    assert {"pointwise", "row_reduce"} <= kinds, sorted(kinds)


def test_the_abi_serves_every_name_it_lists() -> None:
    from fusec.targets.cuda import abi

    for name in abi.names():
        assert getattr(abi, name) is not None, name
    with pytest.raises(AttributeError, match="not part of the generated-kernel ABI"):
        abi.__getattr__("GemmPlan")
    with pytest.raises(ImportError):
        exec("from fusec.targets.cuda.abi import linked_kernel_source", {})  # noqa: S102


def test_the_checker_finds_a_kernel_that_does_not_wait_first() -> None:
    source = (
        '@cuda.jit\ndef a(x):\n    """Doc."""\n    grid_dependency_wait()\n    x[0] = 1\n\n'
        "@cuda.jit(device=True)\ndef b(x):\n    x[0] = 1\n\n"
        "def launch(x):\n    a[1, 1](x)\n"
    )
    assert kernel_first_calls(source) == {"a": "grid_dependency_wait"}
    assert kernel_first_calls(source.replace("    grid_dependency_wait()\n", "")) == {"a": None}


def test_the_checker_finds_foreign_imports() -> None:
    source = (
        "from fusec.targets.cuda.abi import ConvLaunch, cuda\n"
        "from fusec.targets.cuda.gemm.cpp import Epilogue\n"
    )
    kernel = fusec.Kernel("k0", "conv", "cuda", source, (), ())
    assert foreign_imports(kernel) == [("fusec.targets.cuda.gemm.cpp", "Epilogue")]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("file, name, shape", _models(), ids=lambda v: str(v))
def test_onnx_model_modules_import_only_the_abi(file: str, name: str, shape) -> None:
    path = MODELS / file
    if not path.exists():
        pytest.skip(f"{path} is missing (regenerate: tests/frontend/onnx/models/export_models.py)")
    module = import_onnx(path, input_shapes={name: shape}).module
    kernels = fusec.compile(module, target="cuda", executable=False).kernels
    assert kernels, file
    check_kernels(list(kernels), file)


def test_launch_bounds_are_jit_options_on_a_gpu_and_none_under_the_simulator(monkeypatch):
    """``abi.launch_bounds``: numba-cuda's ``launch_bounds`` option; nothing for the
    simulator, whose ``cuda.jit`` does not take it."""
    from fusec.targets.cuda import abi

    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert abi.launch_bounds(256, 5) == {}
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    assert abi.launch_bounds(256, 5) == {"launch_bounds": (256, 5)}
