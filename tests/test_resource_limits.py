"""Resource limits: absurd sizes fail before allocation, deep nesting and huge files hit a
stated limit, each with a clear message (exit 1 on the command line), never a
RecursionError, a MemoryError or the kernel's OOM killer.

Allocations sized by the input are checked against the machine's memory (or
``FUSEC_MEMORY_LIMIT``); these tests lower that limit rather than allocate.
"""

from __future__ import annotations

import io
import re
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec import FusecError, cli
from fusec.frontend.mlir import MAX_NESTING, MAX_SOURCE_BYTES
from fusec.passes.fusion.rules import MAX_RULES_BYTES


def run_cli(capsys, *argv) -> tuple[int, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return rc, err


RELU = """func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %r = ai.relu %x : tensor<2xf32>
  return %r : tensor<2xf32>
}
"""


def _write(tmp_path: Path, text: str, name: str = "g.mlir") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------- memory

OUTER = """func.func @f(%a: tensor<N x1xf32>, %b: tensor<1x N xf32>) -> tensor<N x N xf32> {
  %m = ai.matmul %a, %b : tensor<N x1xf32> * tensor<1x N xf32>
  return %m : tensor<N x N xf32>
}
"""


def outer(n: int) -> str:
    """(n, 1) @ (1, n): inputs of n elements, a result of n * n."""
    return OUTER.replace(" N ", str(n)).replace("N ", str(n)).replace(" N", str(n))


def test_a_huge_splat_constant_fails_before_allocation(tmp_path, capsys):
    big = "tensor<100000x100000x100000xf32>"
    text = f"""func.func @f() -> {big} {{
  %c = arith.constant dense<1.0> : {big}
  return %c : {big}
}}
"""
    for target in ("cpu", "reference"):
        rc, err = run_cli(capsys, "run", _write(tmp_path, text), "--random-inputs", "--target",
                          target)  # fmt: skip
        assert rc == 1
        pattern = rf"g\.mlir:2:36: error: the dense constant {big}: \d+\.\d TiB needed, more than"
        assert re.search(pattern, err), err


@pytest.mark.parametrize("target", ["cpu", "reference"])
def test_a_result_too_big_for_memory_fails_before_allocation(tmp_path, capsys, target):
    rc, err = run_cli(capsys, "run", _write(tmp_path, outer(3_000_000)), "--random-inputs",
                      "--target", target)  # fmt: skip
    assert rc == 1
    assert re.search(r"(buffers of @f|reference run of @f): \d+\.\d TiB needed", err), err


def test_the_limit_can_be_set(tmp_path, capsys, monkeypatch):
    path = _write(tmp_path, outer(2048))  # a 16 MiB result
    monkeypatch.setenv("FUSEC_MEMORY_LIMIT", "8M")
    rc, err = run_cli(capsys, "run", path, "--random-inputs", "--target", "cpu")
    assert rc == 1 and "more than the 8.0 MiB of memory available" in err
    monkeypatch.setenv("FUSEC_MEMORY_LIMIT", "1G")
    assert run_cli(capsys, "run", path, "--random-inputs", "--target", "cpu")[0] == 0
    monkeypatch.setenv("FUSEC_MEMORY_LIMIT", "lots")
    rc, err = run_cli(capsys, "run", path, "--random-inputs", "--target", "cpu")
    assert rc == 1 and "FUSEC_MEMORY_LIMIT='lots': expected a number of bytes" in err


def test_the_python_api_checks_too(monkeypatch):
    monkeypatch.setenv("FUSEC_MEMORY_LIMIT", "1M")
    compiled = fusec.compile(outer(1024), target="reference")
    a = np.ones((1024, 1), np.float32)
    with pytest.raises(FusecError, match=r"reference run of @f: \d+\.0 MiB needed"):
        compiled(a, a.reshape(1, 1024))
    with pytest.raises(FusecError, match="buffers of @f: 4.0 MiB needed"):
        fusec.compile(outer(1024), target="cpu")


def _bomb(path: Path, members: dict[str, tuple[tuple[int, ...], int]]) -> None:
    """An .npz whose members have a header for ``shape`` followed by ``nbytes`` of zeros,
    compressed (a few MB of file for GBs of data)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, (shape, nbytes) in members.items():
            header = io.BytesIO()  # magic, then the header dict
            np.lib.format.write_array_header_1_0(
                header, {"descr": "<f4", "fortran_order": False, "shape": shape}
            )
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                member.write(header.getvalue())
                chunk = bytes(1 << 22)
                for _ in range(nbytes // len(chunk)):
                    member.write(chunk)


@pytest.mark.parametrize(
    ("members", "pattern"),
    [
        ({"x": ((4, 8), 64 << 20), "y": ((100000, 1000), 256 << 20)}, "unexpected array.* y"),
        ({"x": ((100000, 1000), 256 << 20)}, r"'x' has shape \(100000, 1000\), expected"),
    ],
    ids=["extra member", "wrong shape"],
)
def test_an_npz_bomb_is_refused_without_decompressing(tmp_path, capsys, members, pattern):
    path = _write(tmp_path, RELU.replace("2x", "4x8x"))
    bomb = tmp_path / "in.npz"
    _bomb(bomb, members)
    tracemalloc.start()
    try:
        rc, err = run_cli(capsys, "run", path, "--inputs", bomb, "--target", "reference")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 1 and re.search(pattern, err), err
    assert peak < 32 << 20, f"{peak} bytes allocated while refusing the file"


# ------------------------------------------------------------------ nesting

NESTINGS = {
    "dense literal": lambda d: (
        "func.func @f() -> tensor<1xf32> {\n  %c = arith.constant dense<"
        + "[" * d + "1.0" + "]" * d + "> : tensor<1xf32>\n  return %c : tensor<1xf32>\n}\n"
    ),
    "types": lambda d: (
        "func.func @f(%x: " + "tensor<" * d + "f32" + ">" * d + ") -> () {\n  return\n}\n"
    ),
    "arrays": lambda d: (
        "func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %r = ai.relu %x {a.b = "
        + "[" * d + "]" * d + "} : tensor<2xf32>\n  return %r : tensor<2xf32>\n}\n"
    ),
    "dictionaries": lambda d: (
        "func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %r = ai.relu %x {a.b = "
        + "{a = " * d + "1" + "}" * d + "} : tensor<2xf32>\n  return %r : tensor<2xf32>\n}\n"
    ),
    "regions": lambda d: (
        '"builtin.module"() ({\n' + '"test.op"() ({\n' * d + "}) : () -> ()\n" * d
        + "}) : () -> ()\n"
    ),
    "locations": lambda d: (
        "func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %r = ai.relu %x : tensor<2xf32> "
        + "loc(fused[" * d + '"a":1:2' + "])" * d + "\n  return %r : tensor<2xf32>\n}\n"
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_deep_nesting_hits_the_stated_limit(tmp_path, capsys, kind):
    text = NESTINGS[kind](5000)
    rc, err = run_cli(capsys, "compile", _write(tmp_path, text))
    assert rc == 1
    assert re.match(rf"\S+g\.mlir:\d+:\d+: error: brackets nested deeper than {MAX_NESTING} "
                    r"levels \(fusec's limit\)", err), err  # fmt: skip


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_nesting_up_to_the_limit_is_parsed(tmp_path, capsys, kind):
    depth = {"regions": MAX_NESTING // 2 - 1, "locations": MAX_NESTING // 2 - 2}
    text = NESTINGS[kind](depth.get(kind, MAX_NESTING - 3))
    rc, err = run_cli(capsys, "compile", _write(tmp_path, text), "--target", "reference")
    assert "nested" not in err, err  # parsed: either compiled or a normal located error
    if rc != 0:
        assert re.match(r"\S+g\.mlir:\d+:\d+: error: ", err), err


# -------------------------------------------------------------------- size


def test_a_huge_ir_file_is_refused_before_reading(tmp_path, capsys):
    path = tmp_path / "huge.mlir"
    with open(path, "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_SOURCE_BYTES + 1)
    tracemalloc.start()
    try:
        rc, err = run_cli(capsys, "compile", path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 1 and "larger than 1073741824 bytes (1 GiB), fusec's limit" in err
    assert peak < 32 << 20


def test_a_huge_rules_file_is_refused_before_reading(tmp_path, capsys):
    rules = tmp_path / "huge.rules"
    with open(rules, "wb") as handle:
        handle.truncate(MAX_RULES_BYTES + 1)
    path = _write(tmp_path, RELU)
    rc, err = run_cli(capsys, "compile", path, "--pipeline", f'fuse-epilogue{{rules="{rules}"}}')
    assert rc == 1 and "the fusion rules file is larger than 1048576 bytes" in err


# ------------------------------------------------------------------- ONNX


def _folding_model(op: str, n: int):
    """A model whose first node, evaluated at import (its inputs are initializers),
    makes an (n * n)-element float tensor from a few bytes."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    def init(name: str, value) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value), name)

    one = init("one", np.ones(1, np.float32))
    bounds = [init(k, np.array(v, np.float32)) for k, v in (("a", 0), ("b", n * n), ("d", 1))]
    inputs, inits = {
        "ConstantOfShape": (["s"], [init("s", np.array([n, n], np.int64))]),
        "Expand": (["one", "s"], [one, init("s", np.array([n, n], np.int64))]),
        "Tile": (["one", "s"], [one, init("s", np.array([n * n], np.int64))]),
        "Range": (["a", "b", "d"], bounds),
    }[op]
    shape = [n * n] if op in ("Tile", "Range") else [n, n]
    graph = helper.make_graph(
        [
            helper.make_node(op, inputs, ["c"], name="blowup"),
            helper.make_node("Add", ["x", "c"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand", "Tile", "Range"])
def test_onnx_constant_folding_checks_the_size_first(tmp_path, capsys, monkeypatch, op):
    onnx = pytest.importorskip("onnx")
    path = tmp_path / "m.onnx"
    onnx.save(_folding_model(op, 4096), str(path))  # 64 MiB from a model of ~200 bytes
    monkeypatch.setenv("FUSEC_MEMORY_LIMIT", "1M")
    tracemalloc.start()
    try:
        rc, err = run_cli(capsys, "import", path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 1
    expected = (
        rf'\S+m\.onnx: node "blowup": error: {op}: evaluating it at import \(its inputs are '
        r"constants\): 64\.0 MiB needed, more than the 1\.0 MiB"
    )
    assert re.match(expected, err), err
    assert peak < 16 << 20, f"{peak} bytes allocated while refusing the model"


def test_a_large_hex_constant_lexes_in_memory_of_its_own_size():
    """A dense constant's hex string (a weight of a traced function's cached IR) is lexed
    without a backtracking point per character: 8 MB of hex took ~1.2 GB before, the
    parse now peaks near the text's own size (the bytes it decodes, the text)."""
    count = 1 << 20  # 4 MiB of float32: 8 MiB of hex
    data = np.arange(count, dtype=np.float32)
    text = (
        f"func.func @f() -> tensor<{count}xf32> {{\n"
        f'  %c = arith.constant dense<"0x{data.tobytes().hex().upper()}"> : '
        f"tensor<{count}xf32>\n  return %c : tensor<{count}xf32>\n}}\n"
    )
    tracemalloc.start()
    try:
        module = fusec.parse(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(text), f"{peak >> 20} MiB to parse {len(text) >> 20} MiB"
    (constant,) = [op for op in module.walk() if op.name == "arith.constant"]
    assert np.array_equal(np.frombuffer(constant.value.data.data, np.float32), data)
