"""No user text is spliced into generated source, for every template and every language.

fusec generates Python (the cpu and cuda kernel modules, the PyTorch fallback)
and CUDA C++ (the Tensor Core GEMM's main loop and epilogue). Text a user
controls reaches the compiler through symbol names, locations (file names,
ONNX node names), string attributes (discardable ones, ``fusec.tile``), the
``ai.fused`` kind, ONNX node and tensor names and Python function and file
names. Each carries a payload below that would run ``touch MARKER`` if it
were spliced into Python or C++ (it closes strings and comments and starts a
statement), and holds a unique token. The proof, for each (target, kind)
template of every registered target (``fusec.target``: a new template is checked
automatically, a new kind needs a sample group in ``SAMPLES``):

* the token appears in no generated text (``KernelSource.source`` and every
  ``extra_sources`` entry): nothing of the user's text, escaped or not;
* the cpu kernels run (importing every generated module) and the marker is
  never created; the cuda Python modules are imported under Numba's CUDA
  simulator (``test_cuda_modules_import_without_running_payloads``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec.codegen import KernelSource
from fusec.dialect.ops import FusedOp
from fusec.ir.module import entry_function
from fusec.target import REGISTRY, generate, get_target
from fusec.tools.runner import random_inputs

TOKEN = f"PWN{uuid.uuid4().hex[:12]}"


def payloads(marker: Path) -> dict[str, str]:
    """Texts that run ``touch marker`` if spliced, by the context they break out of."""
    cmd = f"touch {marker}"
    return {
        "python-string": f'{TOKEN}"\nimport os; os.system("{cmd}") #',
        "python-single": f"{TOKEN}'''\n__import__('os').system('{cmd}')\n'''",
        "python-comment": f"{TOKEN}\n__import__('os').system('{cmd}')\n#",
        "cpp": f'{TOKEN}"); system("{cmd}"); /* */ //\n#include <cstdlib>\n',
    }


def _mlir_string(text: str) -> str:
    """``text`` as an MLIR string literal."""
    return (
        '"'
        + "".join(c if c.isalnum() or c in " _-./#;()'" else f"\\{ord(c):02X}" for c in text)
        + '"'
    )


# One sample group per fused kind (any target): TYPE is the element type.
SAMPLES = {
    "pointwise": """
      %y = ai.mul %x, %b {ATTR} : tensor<16x32xTYPE> * tensor<32xTYPE> LOC
      %r = ai.gelu %y {ATTR} : tensor<16x32xTYPE> LOC""",
    "row_reduce": """
      %y = ai.layernorm %x, %b, %b {ATTR} : tensor<16x32xTYPE> * VECTOR * VECTOR LOC
      %r = ai.tanh %y {ATTR} : tensor<16x32xTYPE> LOC""",
    "matmul": """
      %m = ai.matmul %x, %w {ATTR} : tensor<16x32xTYPE> * tensor<32x32xTYPE> LOC
      %y = ai.bias_add %m, %b {ATTR} : tensor<16x32xTYPE> * VECTOR LOC
      %r = ai.silu %y {ATTR} : tensor<16x32xTYPE> LOC""",
    "conv": """
      %c = ai.conv2d %i, %k {PADDED} : tensor<1x4x8x8xTYPE> * tensor<4x4x3x3xTYPE> LOC
      %r = ai.relu %c {ATTR} : tensor<1x4x8x8xTYPE> LOC""",
    "pool": """
      %c = ai.max_pool2d %i {POOL} : tensor<1x4x8x8xTYPE> LOC
      %r = ai.relu %c {ATTR} : tensor<1x4x8x8xTYPE> LOC""",
    "reduce": """
      %s = ai.reduce_sum %x {axes = array<i64: 0>, keepdims = true, evil.a = STR} : MATRIX LOC
      %r = ai.add %s, %x {ATTR} : tensor<1x32xTYPE> * MATRIX LOC""",
    "copy": """
      %r = ai.slice %x {SLICE} : MATRIX LOC""",
    "attention": """
      %r = ai.attention %q, %q, %q, %z {scale = 0.5 : f32, evil.a = STR} : HEADS * HEADS *
        HEADS * tensor<TYPE> LOC""",
    "experts": """
      %r = ai.moe_experts %x, %rw, %re, %gu, %dn {evil.a = STR} : MATRIX * tensor<16x2xf32> *
        tensor<16x2xi64> * tensor<4x16x32xTYPE> * tensor<4x32x8xTYPE> LOC""",
    "view": """
      %y = ai.reshape %x {shape = array<i64: 32, 16>, evil.a = STR} : MATRIX LOC
      %r = ai.reshape %y {shape = array<i64: 16, 32>, evil.a = STR} : tensor<32x16xTYPE> LOC""",
}


_PLACEHOLDERS = {
    "{ATTR}": "{evil.a = STR}",
    "{PADDED}": "{padding = array<i64: 1, 1>, evil.a = STR}",
    "{POOL}": "{kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>, evil.a = STR}",
    "{SLICE}": "{offsets = array<i64: 0, 0>, sizes = array<i64: 16, 32>, "
    "strides = array<i64: 1, 1>, evil.a = STR}",
    "MATRIX": "tensor<16x32xTYPE>",
    "VECTOR": "tensor<32xTYPE>",
    "HEADS": "tensor<2x16x64xTYPE>",
}
_PARAMS = {  # every argument a sample may use: name -> type
    "%x": "tensor<16x32xTYPE>",
    "%w": "tensor<32x32xTYPE>",
    "%b": "tensor<32xTYPE>",
    "%i": "tensor<1x4x8x8xTYPE>",
    "%k": "tensor<4x4x3x3xTYPE>",
    "%q": "tensor<2x16x64xTYPE>",
    "%z": "tensor<TYPE>",
    "%rw": "tensor<16x2xf32>",
    "%re": "tensor<16x2xi64>",
    "%gu": "tensor<4x16x32xTYPE>",
    "%dn": "tensor<4x32x8xTYPE>",
}
#: Group operands defined in the function (a constant), not taken as its arguments: the
#: zero mask that sends an f16 attention sample to the flash kernel.
_CONSTANTS = {"%z": "arith.constant dense<0.0> : tensor<TYPE>"}
#: The result type of a sample (default: a matrix).
_RESULTS = {
    "conv": "tensor<1x4x8x8xTYPE>",
    "pool": "tensor<1x4x8x8xTYPE>",
    "attention": "tensor<2x16x64xTYPE>",
}


def sample_module(kind: str, dtype: str, payload: str, *, tile: bool = False) -> str:
    """A function holding one ``ai.fused`` group of ``kind`` with ``payload`` everywhere a
    user can put text: the symbol name, every location and string attribute."""
    string = _mlir_string(payload)
    loc = f"loc({string}:3:4)" if kind != "pointwise" else f"loc({string})"
    body = SAMPLES[kind]
    for placeholder, text in _PLACEHOLDERS.items():
        body = body.replace(placeholder, text)
    body = body.replace("STR", string).replace("LOC", loc).replace("TYPE", dtype)
    used = [a for a in _PARAMS if re.search(rf"{a}\b", body)]
    types = [_PARAMS[a].replace("TYPE", dtype) for a in used]
    result = _RESULTS.get(kind, "tensor<16x32xTYPE>").replace("TYPE", dtype)
    inner = body
    for a in used:
        inner = re.sub(rf"{a}\b", f"{a}_1", inner)
    params = ", ".join(f"{a}: {t}" for a, t in zip(used, types, strict=True) if a not in _CONSTANTS)
    block_args = ", ".join(f"{a}_1: {t}" for a, t in zip(used, types, strict=True))
    attrs = f"{{evil.a = {string}" + (f", fusec.tile = {string}" if tile else "") + "}"
    operands, signature = ", ".join(used), ", ".join(types)
    constants = "".join(
        f"{a} = {_CONSTANTS[a].replace('TYPE', dtype)} {loc}\n          "
        for a in used
        if a in _CONSTANTS
    )
    return textwrap.dedent(f"""\
        func.func @{string}({params}) -> {result} attributes {{evil.f = {string}}} {{
          {constants}%r = ai.fused "{kind}" ({operands}) {attrs} : ({signature}) -> {result} {{
          ^bb0({block_args}):{inner}
            ai.yield %r : {result} {loc}
          }} {loc}
          return %r : {result} {loc}
        }} {loc}
        """)


def _kernels(text: str, target: str) -> list[KernelSource]:
    module = fusec.parse(text)
    fused = [op for op in module.walk() if isinstance(op, FusedOp)]
    assert fused
    return [generate(op, target, f"k{i}") for i, op in enumerate(fused)]


def _texts(kernels: list[KernelSource]) -> list[tuple[str, str]]:
    return [("python", k.source) for k in kernels] + [
        text for k in kernels for text in k.extra_sources
    ]


TEMPLATES = sorted((target, kind) for target in REGISTRY for kind in get_target(target).templates)


def test_every_kind_has_a_sample():
    assert TEMPLATES
    kinds = {kind for _, kind in TEMPLATES}
    assert kinds <= set(SAMPLES), f"add a sample group for {sorted(kinds - set(SAMPLES))}"


@pytest.mark.parametrize(("target", "kind"), TEMPLATES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("context", ["python-string", "python-single", "python-comment", "cpp"])
def test_no_template_splices_user_text(target, kind, dtype, context, tmp_path):
    payload = payloads(tmp_path / "marker")[context]
    text = sample_module(kind, dtype, payload)
    texts = _texts(_kernels(text, target))
    languages = {language for language, _ in texts}
    for language, source in texts:
        assert TOKEN not in source, f"user text in the generated {language} of {target}/{kind}"
    if target == "cuda" and kind in ("matmul", "conv", "attention") and dtype == "f16":
        assert "cuda-c++" in languages  # the Tensor Core kernels' C++ was checked too


def test_a_tile_attribute_is_parsed_never_spliced(tmp_path):
    payload = payloads(tmp_path / "marker")["python-string"]
    text = sample_module("matmul", "f16", payload, tile=True)
    with pytest.raises(fusec.FusecError, match="fusec.tile"):
        _kernels(text, "cuda")


@pytest.mark.parametrize("context", ["python-string", "python-single", "python-comment", "cpp"])
def test_cpu_kernels_run_without_running_payloads(context, tmp_path):
    marker = tmp_path / "marker"
    for kind in SAMPLES:
        text = sample_module(kind, "f32", payloads(marker)[context])
        compiled = fusec.compile(text, target="cpu", pipeline="infer-shapes")
        args = random_inputs(entry_function(compiled.module), 0)
        np.testing.assert_allclose(
            compiled(*args), fusec.reference(text)(*args), rtol=1e-4, atol=1e-4
        )
        for _, source in _texts(compiled.kernels):
            assert TOKEN not in source
    assert not marker.exists()


def test_a_hostile_file_name_is_not_spliced(tmp_path, capsys):
    marker = tmp_path / "marker"
    folder = tmp_path / payloads(marker)["python-string"].replace("/", "_")
    folder.mkdir()
    path = folder / "g.mlir"
    path.write_text(sample_module("pointwise", "f32", "plain"))
    from fusec import cli

    assert cli.main(["run", str(path), "--random-inputs", "--check", "--target", "cpu"]) == 0
    assert cli.main(["compile", str(path), "--emit", "kernels", "--target", "cpu"]) == 0
    assert cli.main(["compile", str(path), "--emit", "kernels", "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert TOKEN not in out and not marker.exists()


def test_hostile_python_names_are_not_spliced(tmp_path):
    marker = tmp_path / "marker"
    payload = payloads(marker)["python-string"]
    source = "def f(x):\n    return ops.relu(x) * 2.0\n"
    namespace = {"ops": fusec.ops}
    exec(compile(source, payload, "exec"), namespace)  # a "file name" with the payload
    fn = namespace["f"]
    fn.__name__ = fn.__qualname__ = payload
    fused = fusec.fuse(fn, target="cpu", disk_cache=False)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(fused(x), np.maximum(x, 0) * 2)
    for kernel in fused.kernels(x):
        assert TOKEN not in kernel.source
    assert not marker.exists()


def test_hostile_onnx_names_are_not_spliced(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    marker = tmp_path / "marker"
    p = payloads(marker)
    w = helper.make_tensor(p["cpp"], TensorProto.FLOAT, [8, 8], np.ones(64).tolist())
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", [p["python-string"], p["cpp"]], [p["python-single"]],
                             name=p["python-comment"]),
            helper.make_node("Relu", [p["python-single"]], ["y"], name=p["python-string"]),
        ],
        p["python-string"],
        [helper.make_tensor_value_info(p["python-string"], TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [w],
        doc_string=p["python-comment"],
    )  # fmt: skip
    model = helper.make_model(graph, producer_name=p["cpp"])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for weights_as_args in (False, True):
        module = fusec.from_onnx(str(path), weights_as_args=weights_as_args)
        for target in ("cpu", "cuda"):
            compiled = fusec.compile(module, target="reference")
            for op in compiled.module.walk():
                if isinstance(op, FusedOp):
                    kernel = generate(op, target, "k0")
                    for _, source in _texts([kernel]):
                        assert TOKEN not in source
        compiled = fusec.compile(module, target="cpu")
        args = random_inputs(entry_function(compiled.module), 0)
        compiled(*args)
    assert not marker.exists()


SIM_IMPORT = r"""
import sys
import fusec
from fusec.targets.cuda.kernels import load_kernel_module
for path in sys.argv[2:]:
    text = open(path).read()
    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes")
    for kernel in compiled.kernels:
        if kernel.kind in ("pointwise", "row_reduce"):
            load_kernel_module(kernel)
print("imported")
"""


@pytest.mark.requires_target("cuda")
def test_cuda_modules_import_without_running_payloads(tmp_path):
    marker = tmp_path / "marker"
    paths = []
    for context, payload in payloads(marker).items():
        for kind in ("pointwise", "row_reduce"):
            path = tmp_path / f"{kind}-{context}.mlir"
            path.write_text(sample_module(kind, "f32", payload))
            paths.append(str(path))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", FUSEC_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-c", SIM_IMPORT, "x", *paths],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-3000:]
    assert not marker.exists()


def test_control_characters_in_the_input_reach_no_terminal(tmp_path, capsys):
    from fusec import cli

    path = tmp_path / "esc.mlir"  # an OSC title, a bell, a colour and a bidi override
    path.write_text('func.func @f() -> () {\n  %r = "ai.\x1b]0;pwned\x07\x1b[31m\u202eX" %x\n}\n')
    assert cli.main(["compile", str(path)]) == 1
    err = capsys.readouterr().err
    assert not any(c in err for c in "\x1b\x07\u202e"), repr(err)
    assert "'ai.\\x1b]0;pwned\\x07\\x1b[31m\\u202eX'" in err  # shown, escaped
    source, caret = err.splitlines()[1:3]
    assert source.index("ai.") == caret.index("^")  # the caret still points at the name
