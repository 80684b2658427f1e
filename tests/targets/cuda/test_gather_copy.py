"""The cuda gather kernel of index-map copy groups (``fusec.targets.cuda.gather``).

Each case is one ``ai.fused "copy"`` group (the head split and merge of attention,
slices with negative strides, gathers with and without an arithmetic progression,
concats, and chains of them) in f16, bf16 and f32. Under Numba's CUDA simulator (a
subprocess: it must be switched on before numba.cuda is imported) every result must
equal the reference bit for bit, poisoned outputs first. Without the simulator the
tests check which kernel each group gets.

Run as a script (``NUMBA_ENABLE_CUDASIM=1 python test_gather_copy.py NAME...``) it
prints one JSON line per case.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest


def _t(shape, dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def _group(params, result, body: list[str], dtype: str) -> str:
    """A function of one copy group: ``params`` (name, shape), ``body`` lines over them."""
    args = ", ".join(f"%{n}: {_t(s, dtype)}" for n, s in params)
    operands = ", ".join(f"%{n}" for n, _ in params)
    types = ", ".join(_t(s, dtype) for _, s in params)
    inner = ", ".join(f"%{n}1: {_t(s, dtype)}" for n, s in params)
    rt = _t(result, dtype)
    lines = [
        f"func.func @f({args}) -> {rt} {{",
        f'  %r = ai.fused "copy" ({operands}) : ({types}) -> {rt} {{',
        f"  ^bb0({inner}):",
        *(f"    {line}" for line in body),
        f"    ai.yield %y : {rt}",
        "  }",
        f"  return %r : {rt}",
        "}",
    ]
    return "\n".join(lines)


def cases(dtype: str) -> dict[str, str]:
    t = lambda shape: _t(shape, dtype)  # noqa: E731
    return {
        "head_split": _group(
            [("x", (2, 6, 8))],
            (2, 2, 6, 4),
            [
                f"%v = ai.reshape %x1 {{shape = array<i64: 2, 6, 2, 4>}} : {t((2, 6, 8))}",
                f"%y = ai.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : {t((2, 6, 2, 4))}",
            ],
            dtype,
        ),
        "head_merge": _group(
            [("x", (2, 2, 6, 4))],
            (2, 6, 8),
            [
                f"%v = ai.transpose %x1 {{perm = array<i64: 0, 2, 1, 3>}} : {t((2, 2, 6, 4))}",
                f"%y = ai.reshape %v {{shape = array<i64: 2, 6, 8>}} : {t((2, 6, 2, 4))}",
            ],
            dtype,
        ),
        "transpose_inner": _group(
            [("x", (3, 5, 7))],
            (7, 3, 5),
            [f"%y = ai.transpose %x1 {{perm = array<i64: 2, 0, 1>}} : {t((3, 5, 7))}"],
            dtype,
        ),
        "slice_negative": _group(
            [("x", (4, 9))],
            (2, 4),
            [
                "%y = ai.slice %x1 {offsets = array<i64: 3, 8>, sizes = array<i64: 2, 4>, "
                f"strides = array<i64: -2, -2>}} : {t((4, 9))}"
            ],
            dtype,
        ),
        "gather_table": _group(
            [("x", (3, 6))],
            (3, 4),
            [
                "%y = ai.gather %x1 {axis = -1 : i64, indices = array<i64: 5, 0, 2, 2>} : "
                + t((3, 6))
            ],
            dtype,
        ),
        "gather_progression": _group(
            [("x", (8, 3))],
            (3, 3),
            [f"%y = ai.gather %x1 {{axis = 0 : i64, indices = array<i64: 1, 4, 7>}} : {t((8, 3))}"],
            dtype,
        ),
        # the fast paths (fusec.targets.cuda.strided): shapes off the vector width and tile
        "vector_edges": _group(  # runs of 6 elements: 4-byte vectors of f16, 8-byte of f32
            [("x", (2, 5, 12))],
            (2, 2, 5, 6),
            [
                f"%v = ai.reshape %x1 {{shape = array<i64: 2, 5, 2, 6>}} : {t((2, 5, 12))}",
                f"%y = ai.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : {t((2, 5, 2, 6))}",
            ],
            dtype,
        ),
        "qkv_slice_split": _group(  # K of a fused QKV projection, split into heads
            [("x", (2, 5, 48))],
            (2, 2, 5, 8),
            [
                "%k = ai.slice %x1 {offsets = array<i64: 0, 0, 16>, sizes = array<i64: 2, 5, 16>, "
                f"strides = array<i64: 1, 1, 1>}} : {t((2, 5, 48))}",
                f"%v = ai.reshape %k {{shape = array<i64: 2, 5, 2, 8>}} : {t((2, 5, 16))}",
                f"%y = ai.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : {t((2, 5, 2, 8))}",
            ],
            dtype,
        ),
        "qkv_unpack": _group(  # [B, S, 3 * E] -> [3, B, S, E] (nn.MultiheadAttention's)
            [("x", (2, 5, 24))],
            (3, 2, 5, 8),
            [
                f"%v = ai.reshape %x1 {{shape = array<i64: 2, 5, 3, 8>}} : {t((2, 5, 24))}",
                f"%y = ai.transpose %v {{perm = array<i64: 2, 0, 1, 3>}} : {t((2, 5, 3, 8))}",
            ],
            dtype,
        ),
        "odd_offset": _group(  # a run starting at an odd element: no f16 vector fits
            [("x", (4, 9))],
            (4, 8),
            [
                "%y = ai.slice %x1 {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 8>, "
                f"strides = array<i64: 1, 1>}} : {t((4, 9))}"
            ],
            dtype,
        ),
        "k_transpose": _group(  # [B, H, S, D] -> [B, H, D, S], S = 37: edge tiles
            [("x", (2, 2, 37, 8))],
            (2, 2, 8, 37),
            [f"%y = ai.transpose %x1 {{perm = array<i64: 0, 1, 3, 2>}} : {t((2, 2, 37, 8))}"],
            dtype,
        ),
        "split_to_k_transpose": _group(  # [B, S, H * D] -> [B, H, D, S] in one group
            [("x", (2, 5, 24))],
            (2, 3, 8, 5),
            [
                f"%v = ai.reshape %x1 {{shape = array<i64: 2, 5, 3, 8>}} : {t((2, 5, 24))}",
                f"%y = ai.transpose %v {{perm = array<i64: 0, 2, 3, 1>}} : {t((2, 5, 3, 8))}",
            ],
            dtype,
        ),
        "slice_transpose": _group(  # a tile at an offset, 33 x 34: two tiles each way
            [("x", (3, 36, 40))],
            (2, 34, 33),
            [
                "%s = ai.slice %x1 {offsets = array<i64: 1, 2, 3>, sizes = array<i64: 2, 33, 34>, "
                f"strides = array<i64: 1, 1, 1>}} : {t((3, 36, 40))}",
                f"%y = ai.transpose %s {{perm = array<i64: 0, 2, 1>}} : {t((2, 33, 34))}",
            ],
            dtype,
        ),
        "wide_transpose": _group(  # 16-bit: 64 x 64 tiles, whole ones and edge ones
            [("x", (70, 130))],
            (130, 70),
            [f"%y = ai.transpose %x1 {{perm = array<i64: 1, 0>}} : {t((70, 130))}"],
            dtype,
        ),
        "to_channels_last_3": _group(  # NCHW -> NHWC of 3 channels: a 256 x 4 tile
            [("x", (2, 3, 5, 8))],
            (2, 5, 8, 3),
            [f"%y = ai.transpose %x1 {{perm = array<i64: 0, 2, 3, 1>}} : {t((2, 3, 5, 8))}"],
            dtype,
        ),
        "from_channels_last_3": _group(  # NHWC -> NCHW of 3 channels: a 4 x 256 tile
            [("x", (2, 5, 8, 3))],
            (2, 3, 5, 8),
            [f"%y = ai.transpose %x1 {{perm = array<i64: 0, 3, 1, 2>}} : {t((2, 5, 8, 3))}"],
            dtype,
        ),
        "narrow_whole_tiles": _group(  # 600 x 4 -> 4 x 600: whole 256 x 4 tiles and an edge
            [("x", (4, 600))],
            (600, 4),
            [f"%y = ai.transpose %x1 {{perm = array<i64: 1, 0>}} : {t((4, 600))}"],
            dtype,
        ),
        "class_token": _group(  # ViT's class token before the patches: aligned pieces
            [("c", (2, 1, 8)), ("x", (2, 4, 8))],
            (2, 5, 8),
            [f"%y = ai.concat %c1, %x1 {{axis = 1 : i64}} : {t((2, 1, 8))} * {t((2, 4, 8))}"],
            dtype,
        ),
        "rotate_halves": _group(  # cat(x[..., 4:], x[..., :4]): two slices of one input
            [("x", (2, 3, 8))],
            (2, 3, 8),
            [
                "%h = ai.slice %x1 {offsets = array<i64: 0, 0, 4>, sizes = array<i64: 2, 3, 4>, "
                f"strides = array<i64: 1, 1, 1>}} : {t((2, 3, 8))}",
                "%l = ai.slice %x1 {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 3, 4>, "
                f"strides = array<i64: 1, 1, 1>}} : {t((2, 3, 8))}",
                f"%y = ai.concat %h, %l {{axis = 2 : i64}} : {t((2, 3, 4))} * {t((2, 3, 4))}",
            ],
            dtype,
        ),
        "concat_odd": _group(  # rows of 3 + 5 elements: no 16-bit vector fits
            [("a", (2, 3)), ("b", (2, 5))],
            (2, 8),
            [f"%y = ai.concat %a1, %b1 {{axis = 1 : i64}} : {t((2, 3))} * {t((2, 5))}"],
            dtype,
        ),
        "concat_chain": _group(
            [("a", (2, 3, 4)), ("b", (2, 1, 4)), ("c", (2, 5, 4))],
            (2, 4, 9),
            [
                f"%v = ai.concat %a1, %b1, %c1 {{axis = 1 : i64}} : "
                f"{t((2, 3, 4))} * {t((2, 1, 4))} * {t((2, 5, 4))}",
                f"%y = ai.transpose %v {{perm = array<i64: 0, 2, 1>}} : {t((2, 9, 4))}",
            ],
            dtype,
        ),
    }


#: The path each case's kernel takes (``strided.CopyPlan.label``), per dtype where it differs.
PATHS = {
    "head_split": {
        **{"f16": "vectorised 8 B", "bf16": "vectorised 8 B", "f32": "vectorised 16 B"},
        **{"i64": "vectorised 16 B", "i32": "vectorised 16 B", "i1": "vectorised 4 B"},
    },
    "head_merge": {"f16": "vectorised 8 B", "bf16": "vectorised 8 B", "f32": "vectorised 16 B"},
    "transpose_inner": "tiled transpose 32x32",
    "slice_negative": "gather",
    "gather_table": "gather",
    "gather_progression": {"f16": "gather", "bf16": "gather", "f32": "vectorised 4 B"},
    "vector_edges": {"f16": "vectorised 4 B", "bf16": "vectorised 4 B", "f32": "vectorised 8 B"},
    "qkv_slice_split": "vectorised 16 B",
    "qkv_unpack": "vectorised 16 B",
    "odd_offset": {"f16": "gather", "bf16": "gather", "f32": "vectorised 4 B"},
    "k_transpose": "tiled transpose 8x128",  # D = 8: the narrow tile
    "split_to_k_transpose": "tiled transpose 32x32",
    "slice_transpose": "tiled transpose 32x32",
    "wide_transpose": {
        "f16": "tiled transpose 64x64",
        "bf16": "tiled transpose 64x64",
        "f32": "tiled transpose 32x32",
    },
    "to_channels_last_3": "tiled transpose 256x4",
    "from_channels_last_3": "tiled transpose 4x256",
    "narrow_whole_tiles": "tiled transpose 256x4",
    "class_token": "vectorised 16 B",
    "rotate_halves": {"f16": "vectorised 8 B", "bf16": "vectorised 8 B", "f32": "vectorised 16 B"},
    "concat_odd": {"f16": "gather", "bf16": "gather", "f32": "vectorised 4 B"},
    "concat_chain": "gather",
}


def expected_path(name: str) -> str:
    case, dtype = name.rsplit("-", 1)
    path = PATHS[case]
    return path if isinstance(path, str) else path[dtype]


DTYPES = ("f16", "bf16", "f32")
#: The bits of a signalling NaN with a payload, per element type.
SIGNALLING_NAN = {"f16": 0x7C05, "bf16": 0x7F85, "f32": 0x7F800005}
NAMES = [f"{name}-{dtype}" for dtype in DTYPES for name in cases(dtype)]
#: Integer and bool copies: each path's kernel module run directly (the cuda runtime
#: does not take integer tensors yet), bit for bit.
INT_DTYPES = {"i64": np.int64, "i32": np.int32, "i1": np.uint8}
INT_NAMES = [
    f"{name}-{dtype}"
    for dtype in INT_DTYPES
    for name in ("head_split", "k_transpose", "slice_transpose", "concat_chain")
]


def _run(name: str) -> dict:
    """One case under the simulator: the compiled result against the reference."""
    import fusec
    from fusec.ir.dtypes import numpy_dtype
    from fusec.runtime.reference import run_reference

    case, dtype = name.rsplit("-", 1)
    if dtype in INT_DTYPES:
        return _run_module(name)
    text = cases(dtype)[case]
    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes")
    rng = np.random.default_rng(len(name))
    module = compiled.module
    from fusec.dialect.ops import spec_of
    from fusec.ir.module import entry_function

    args = []
    for param in entry_function(module).function_type.inputs.data:
        spec = spec_of(param)
        values = rng.uniform(0.5, 1.5, spec.shape) * rng.choice([-1.0, 1.0], spec.shape)
        args.append(values.astype(numpy_dtype(spec.dtype)))
    args[0].reshape(-1)[0] = np.nan  # moved as bits: NaN stays NaN
    for arg in args:  # signalling NaNs with payloads, which a float conversion would quiet
        bits = arg.reshape(-1).view(np.uint32 if dtype == "f32" else np.uint16)
        bits[3::7] = SIGNALLING_NAN[dtype]
    (out,) = compiled._runner(args, poison=True)
    (ref,) = run_reference(module, args)
    want = expected_bits(cases("f32")[case], args)
    same = np.array_equal(np.asarray(out).view(want.dtype), want)
    # the values too (the reference converts, so its signalling NaNs are quiet: NaN == NaN)
    with np.errstate(invalid="ignore"):
        same = same and np.array_equal(np.asarray(out, np.float32), ref.astype(np.float32), True)
    kinds = [k.source for k in compiled.kernels]
    return {"name": name, "same": bool(same), "kinds": kinds, "path": path_of(kinds[0])}


def _run_module(name: str) -> dict:
    """An integer case: its kernel module launched on random inputs, the output poisoned."""
    import types

    import fusec

    case, dtype = name.rsplit("-", 1)
    compiled = fusec.compile(
        cases(dtype)[case], target="cuda", pipeline="infer-shapes", executable=False
    )
    (kernel,) = compiled.kernels
    module = types.ModuleType(kernel.name)
    exec(compile(kernel.source, kernel.name, "exec"), module.__dict__)  # noqa: S102
    rng = np.random.default_rng(len(name))
    info = np.iinfo(INT_DTYPES[dtype])
    args = [
        rng.integers(info.min, info.max, spec.shape, dtype=INT_DTYPES[dtype], endpoint=True)
        for spec in kernel.inputs
    ]
    (spec,) = kernel.outputs
    out = np.full(math.prod(spec.shape), info.max // 3, INT_DTYPES[dtype])
    module.launch(*(a.reshape(-1) for a in args), out)
    want = expected_bits(cases("f32")[case], args)
    same = np.array_equal(out.view(want.dtype).reshape(spec.shape), want)
    return {
        "name": name,
        "same": bool(same),
        "kinds": [kernel.source],
        "path": path_of(kernel.source),
    }


def expected_bits(f32_text: str, args: list[np.ndarray]) -> np.ndarray:
    """The result's bits, each element's fetched from the input element that the f32
    reference of the same group moves there: the reference runs on the inputs' element
    numbers (input k's element i is ``k * 2**20 + i``), exact in f32 for these sizes."""
    import fusec
    from fusec.runtime.reference import run_reference

    module = fusec.compile(f32_text, target="cuda", pipeline="infer-shapes", executable=False)
    numbers = [
        (k * 2**20 + np.arange(a.size, dtype=np.float64)).reshape(a.shape).astype(np.float32)
        for k, a in enumerate(args)
    ]
    assert all(a.size < 2**20 for a in args)
    (moved,) = run_reference(module.module, numbers)
    moved = moved.astype(np.int64)
    bits = [a.reshape(-1).view(f"u{a.itemsize}") for a in args]
    want = np.empty(moved.shape, bits[0].dtype)
    for k, flat in enumerate(bits):
        mine = moved >> 20 == k
        want[mine] = flat[moved[mine] & (2**20 - 1)]
    return want


def path_of(source: str) -> str:
    """The path a copy kernel's header names (``path: LABEL (``)."""
    match = re.search(r"path: (.*?) \(", source)
    return match.group(1) if match else "?"


@pytest.mark.requires_target("cuda")
def test_copy_groups_run_as_gather_kernels_under_the_simulator() -> None:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, __file__, *NAMES, *INT_NAMES],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["name"] for r in records] == NAMES + INT_NAMES, done.stderr[-3000:]
    for record in records:
        assert "error" not in record, record
        assert record["same"], f"{record['name']}: differs from the reference"
        assert "template: gather" in record["kinds"][0], record["name"]
        assert record["path"] == expected_path(record["name"]), record["name"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_copy_groups_on_the_gpu(name: str) -> None:
    record = _run(name)
    assert record["same"], f"{name}: differs from the reference"
    assert "template: gather" in record["kinds"][0]
    assert record["path"] == expected_path(name)


@pytest.mark.requires_target("cuda")
def test_attention_head_split_of_the_default_pipeline_is_a_gather_kernel() -> None:
    import fusec

    d = "f16"
    x, w, y = _t((2, 16, 128), d), _t((128, 128), d), _t((2, 2, 16, 64), d)
    text = f"""func.func @f(%x: {x}, %w: {w}) -> {y} {{
  %q = ai.matmul %x, %w : {_t((2, 16, 128), d)} * {_t((128, 128), d)}
  %v = ai.reshape %q {{shape = array<i64: 2, 16, 2, 64>}} : {_t((2, 16, 128), d)}
  %t = ai.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : {_t((2, 16, 2, 64), d)}
  %e = ai.exp %t : {_t((2, 2, 16, 64), d)}
  return %e : {_t((2, 2, 16, 64), d)}
}}"""
    # without read-views-in-place (the pipeline before it): the head split's copy
    compiled = fusec.compile(
        text, target="cuda", pipeline="fusec-cuda-separate-rope", executable=False
    )
    copies = [k for k in compiled.kernels if k.kind == "copy"]
    assert copies, [k.kind for k in compiled.kernels]
    for kernel in copies:
        assert "template: gather" in kernel.source and "FALLBACK" not in kernel.source
    # the default reads it in place: the transpose keeps the last dim (ab315d4)
    kinds = [k.kind for k in fusec.compile(text, target="cuda", executable=False).kernels]
    assert kinds == ["matmul", "pointwise"], kinds


if __name__ == "__main__":
    for case_name in sys.argv[1:]:
        try:
            result = _run(case_name)
        except Exception as err:  # reported to the test, which fails with it
            result = {"name": case_name, "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(result), flush=True)
