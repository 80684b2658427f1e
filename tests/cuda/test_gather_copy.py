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
import os
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


DTYPES = ("f16", "bf16", "f32")
NAMES = [f"{name}-{dtype}" for dtype in DTYPES for name in cases(dtype)]


def _run(name: str) -> dict:
    """One case under the simulator: the compiled result against the reference."""
    import fusec
    from fusec.ir.dtypes import numpy_dtype
    from fusec.runtime.reference import run_reference

    case, dtype = name.rsplit("-", 1)
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
    (out,) = compiled._runner(args, poison=True)
    (ref,) = run_reference(module, args)
    same = np.array_equal(
        np.asarray(out).view(np.uint8), np.ascontiguousarray(ref.astype(out.dtype)).view(np.uint8)
    )
    return {"name": name, "same": bool(same), "kinds": [k.source for k in compiled.kernels]}


@pytest.mark.requires_target("cuda")
def test_copy_groups_run_as_gather_kernels_under_the_simulator() -> None:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, __file__, *NAMES],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["name"] for r in records] == NAMES, done.stderr[-3000:]
    for record in records:
        assert "error" not in record, record
        assert record["same"], f"{record['name']}: differs from the reference"
        assert "template: gather" in record["kinds"][0], record["name"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_copy_groups_on_the_gpu(name: str) -> None:
    record = _run(name)
    assert record["same"], f"{name}: differs from the reference"
    assert "template: gather" in record["kinds"][0]


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
    compiled = fusec.compile(text, target="cuda", executable=False)
    copies = [k for k in compiled.kernels if k.kind == "copy"]
    assert copies, [k.kind for k in compiled.kernels]
    for kernel in copies:
        assert "template: gather" in kernel.source and "FALLBACK" not in kernel.source


if __name__ == "__main__":
    for case_name in sys.argv[1:]:
        try:
            result = _run(case_name)
        except Exception as err:  # reported to the test, which fails with it
            result = {"name": case_name, "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(result), flush=True)
