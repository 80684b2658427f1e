"""What the fuzzers check: one function per input format, importable without atheris.

``CHECKS[name](data)`` feeds the bytes ``data`` to one of fusec's readers the
way a user's file reaches it and asserts the contract for hostile input:
either it is accepted (then the rest of the pipeline must accept it too, or
reject it with a located error) or it is refused with a ``FusecError`` that
says where; anything else (another exception, a hang, memory without bound) is
a crash. ``fuzz/fuzz.py`` runs these under atheris; ``tests/fuzz`` runs the
corpus and every crash found so far through them in CI.

* ``mlir``: the text as an ``.mlir`` file: parse and verify, the default
  pipeline, the printed IR parsing back to the same module, the cpu and cuda
  kernel sources of every group, and (small tensors only) the reference
  executor on random inputs.
* ``rules``: the text as a fusion rules file, then the pipeline run with it.
* ``onnx``: the bytes as an ``.onnx`` file: import (and compile when accepted).
  ``mutate_onnx`` is its structure-aware mutator: one change to a parsed model
  (a dimension, an attribute, an operator, an edge, an initializer, the opset),
  so the mutated protobufs stay readable and reach the importer.
* ``npz``: the bytes as the ``--inputs`` file of a fixed function.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

import fusec
from fusec.errors import FusecError

#: Tensors up to this many elements are run on the reference executor.
RUN_LIMIT = 4096

_TMP = Path(tempfile.mkdtemp(prefix="fusec-fuzz-"))


def _file(data: bytes, suffix: str) -> Path:
    """``data`` written to a scratch file (the readers take paths, as the CLI does)."""
    path = _TMP / f"input{suffix}"
    path.write_bytes(data)
    return path


def _located(err: FusecError) -> None:
    assert err.location is not None, f"a diagnostic without a location: {err.message}"


def _check_module(module, name: str) -> None:
    """The rest of the pipeline on an accepted module: located errors only."""
    from fusec.api import parse, print_ir, run_pipeline
    from fusec.dialect.ops import FusedOp
    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference
    from fusec.target import get_target
    from fusec.tools.runner import random_inputs

    try:
        run_pipeline(module)
    except FusecError as err:
        _located(err)
        return
    text = print_ir(module, locations=True)
    again = parse(text)
    assert print_ir(again, locations=True) == text, "printed IR does not parse back the same"
    for target in ("cpu", "cuda"):
        for op in module.walk():
            if isinstance(op, FusedOp):
                try:
                    get_target(target).generate(op, "k0")
                except FusecError as err:
                    _located(err)
    try:
        fn = entry_function(module)
    except FusecError:
        return  # several public functions: no entry to run
    types = [*fn.function_type.inputs.data, *(r.type for op in fn.walk() for r in op.results)]
    if all(int(np.prod(t.get_shape())) <= RUN_LIMIT for t in types if hasattr(t, "get_shape")):
        try:
            run_reference(module, random_inputs(fn, 0))
        except FusecError as err:
            _located(err)


def check_mlir(data: bytes) -> None:
    from fusec.frontend.mlir import parse_module, read_source

    path = _file(data, ".mlir")
    try:
        text, name = read_source(path)
        module = parse_module(text, name)
    except FusecError as err:
        _located(err)
        return
    _check_module(module, name)


_MODULE = """func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>)
    -> tensor<4x8xf32> {
  %m = ai.matmul %x, %w : tensor<4x8xf32> * tensor<8x8xf32>
  %y = ai.bias_add %m, %b : tensor<4x8xf32> * tensor<8xf32>
  %r = ai.relu %y : tensor<4x8xf32>
  %s = ai.softmax %r : tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}
"""


def check_rules(data: bytes) -> None:
    from fusec.api import parse, run_pipeline
    from fusec.passes.fusion.rules import load_rules

    path = _file(data, ".rules")
    try:
        load_rules(path)
    except FusecError as err:
        _located(err)
        return
    stages = ("prologue", "epilogue", "reduction", "elementwise", "singletons")
    fusion = ",".join(f'fuse-{stage}{{rules="{path}"}}' for stage in stages)
    try:
        run_pipeline(parse(_MODULE), f"infer-shapes,canonicalize,cse,{fusion}")
    except FusecError as err:
        _located(err)


def check_onnx(data: bytes) -> None:
    path = _file(data, ".onnx")
    try:
        module = fusec.from_onnx(str(path))
    except FusecError as err:
        _located(err)
        return
    _check_module(module, str(path))


_NPZ_FUNCTION = """func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf16>) -> tensor<2x3xf32> {
  %c = ai.cast %y : tensor<3xf16> to tensor<3xf32>
  %r = ai.add %x, %c : tensor<2x3xf32> * tensor<3xf32>
  return %r : tensor<2x3xf32>
}
"""


def check_npz(data: bytes) -> None:
    from fusec.ir.module import entry_function
    from fusec.tools.runner import load_inputs

    fn = entry_function(fusec.parse(_NPZ_FUNCTION))
    path = _file(data, ".npz")
    try:
        arrays = load_inputs(fn, path)
    except FusecError as err:
        assert str(path) in err.message or err.location is not None, err.message
        return
    assert [a.shape for a in arrays] == [(2, 3), (3,)]
    assert [str(a.dtype) for a in arrays] == ["float32", "float16"]


# ------------------------------------------------------- structure-aware mutation

#: Operators a mutated node may become: what the importer converts or folds, and a few
#: it does not.
ONNX_OPS = (
    "Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Conv", "Relu", "Sigmoid", "Tanh", "Exp",
    "Sqrt", "Softmax", "LayerNormalization", "BatchNormalization", "Reshape", "Transpose",
    "Slice", "Concat", "Gather", "ReduceMean", "ReduceSum", "MaxPool", "AveragePool",
    "Where", "Clip", "Pow", "Cast", "Shape", "ConstantOfShape", "Expand", "Tile", "Range",
    "Unsqueeze", "Squeeze", "Flatten", "Erf", "Identity", "Constant", "NonZero", "Loop",
)  # fmt: skip

#: Numbers a mutated dimension, attribute or opset becomes: edges first.
_EDGE_INTS = (0, 1, -1, 2, 3, 7, 64, 2**31 - 1, -(2**31), 2**62, -(2**62), 10**6)


def mutate_onnx(data: bytes, seed: int) -> bytes | None:
    """``data`` (a serialized ModelProto) with one structural change drawn from ``seed``:
    a dimension, an attribute value, an operator type, an edge (node input/output), a
    node removed or repeated, an initializer's type, dims or bytes, the opset. None when
    ``data`` is no model (the caller mutates the bytes instead). Byte mutations of a
    protobuf mostly make it unreadable; these keep it readable and reach the importer."""
    import random

    import onnx

    try:
        model = onnx.ModelProto.FromString(data)
    except Exception:  # protobuf's DecodeError and friends
        return None
    rng = random.Random(seed)
    graph = model.graph
    try:
        for _ in range(1 + rng.randrange(3)):
            _MUTATIONS[rng.randrange(len(_MUTATIONS))](model, graph, rng)
        return model.SerializeToString()
    except Exception:  # a field protobuf refuses, e.g. a name that is not UTF-8 text
        return None


def _pick(rng, items):
    return items[rng.randrange(len(items))] if len(items) else None


def _an_int(rng) -> int:
    return rng.choice(_EDGE_INTS) if rng.random() < 0.7 else rng.randrange(-8, 64)


def _mutate_dim(model, graph, rng) -> None:
    infos = [*graph.input, *graph.output, *graph.value_info]
    info = _pick(rng, infos)
    if info is None or not info.type.tensor_type.shape.dim:
        return
    dim = _pick(rng, info.type.tensor_type.shape.dim)
    if rng.random() < 0.2:
        dim.dim_param = rng.choice(["N", "batch", ""])
    else:
        dim.dim_value = _an_int(rng)


def _mutate_attribute(model, graph, rng) -> None:
    node = _pick(rng, graph.node)
    if node is None or not node.attribute:
        return
    attr = _pick(rng, node.attribute)
    if attr.ints:
        attr.ints[rng.randrange(len(attr.ints))] = _an_int(rng)
        if rng.random() < 0.3:
            attr.ints.append(_an_int(rng))
    elif attr.floats:
        attr.floats[rng.randrange(len(attr.floats))] = rng.choice([0.0, -1.0, 1e30, float("nan")])
    elif attr.HasField("i"):
        attr.i = _an_int(rng)
    elif attr.HasField("f"):
        attr.f = rng.choice([0.0, -0.0, 1e-30, 1e30, float("inf"), float("nan")])
    elif attr.HasField("s"):
        attr.s = rng.choice([b"", b"tanh", b"SAME_UPPER", b"\xff", b"NOTSET"])
    if rng.random() < 0.2:
        attr.name = rng.choice(["axis", "axes", "perm", "pads", "strides", "group", "alpha", "x"])


def _mutate_op_type(model, graph, rng) -> None:
    node = _pick(rng, graph.node)
    if node is not None:
        node.op_type = rng.choice(ONNX_OPS)


def _mutate_edge(model, graph, rng) -> None:
    node = _pick(rng, graph.node)
    if node is None:
        return
    names = [n for other in graph.node for n in other.output]
    names += [i.name for i in graph.input] + [t.name for t in graph.initializer]
    names += ["", "missing"]
    if node.input and rng.random() < 0.7:
        node.input[rng.randrange(len(node.input))] = rng.choice(names)
    elif rng.random() < 0.5:
        node.input.append(rng.choice(names))
    elif node.output:
        node.output[rng.randrange(len(node.output))] = rng.choice(names)


def _mutate_nodes(model, graph, rng) -> None:
    if not graph.node:
        return
    index = rng.randrange(len(graph.node))
    if rng.random() < 0.5:
        del graph.node[index]
    else:
        graph.node.insert(rng.randrange(len(graph.node) + 1), graph.node[index])


def _mutate_initializer(model, graph, rng) -> None:
    tensor = _pick(rng, graph.initializer)
    if tensor is None:
        return
    choice = rng.randrange(3)
    if choice == 0 and tensor.dims:
        tensor.dims[rng.randrange(len(tensor.dims))] = _an_int(rng)
    elif choice == 1:
        tensor.data_type = rng.randrange(0, 22)
    elif tensor.raw_data:
        raw = bytearray(tensor.raw_data)
        raw[rng.randrange(len(raw))] = rng.randrange(256)
        tensor.raw_data = bytes(raw[: rng.randrange(len(raw) + 1)] if rng.random() < 0.3 else raw)


def _mutate_opset(model, graph, rng) -> None:
    opset = _pick(rng, model.opset_import)
    if opset is not None:
        opset.version = rng.choice([1, 6, 7, 11, 13, 17, 18, 21, 22, 23, 99, 0, -1])


_MUTATIONS = (
    _mutate_dim,
    _mutate_attribute,
    _mutate_op_type,
    _mutate_edge,
    _mutate_nodes,
    _mutate_initializer,
    _mutate_opset,
)


CHECKS: dict[str, Callable[[bytes], None]] = {
    "mlir": check_mlir,
    "rules": check_rules,
    "onnx": check_onnx,
    "npz": check_npz,
}

#: Where each fuzzer's corpus and crashes live (in the repository).
ROOT = Path(__file__).parent


def corpus_files(name: str) -> list[Path]:
    return sorted((ROOT / "corpus" / name).glob("*"))


def crash_files(name: str) -> list[Path]:
    return sorted((ROOT / "crashes" / name).glob("*"))


def warm_up(name: str) -> None:
    """Run the check once on each seed, so every module it uses is imported."""
    for path in corpus_files(name)[:8]:
        CHECKS[name](path.read_bytes())


def quiet() -> None:
    """Silence numpy's warnings on hostile values (they are not findings)."""
    import warnings

    np.seterr(all="ignore")
    warnings.simplefilter("ignore")
    os.environ.setdefault("FUSEC_MEMORY_LIMIT", "2G")
