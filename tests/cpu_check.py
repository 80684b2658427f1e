"""Helpers of the cpu back-end tests: wrap IR in one fused group, run poisoned, compare.

Every check runs the generated kernels with output buffers pre-filled with NaN
(so an element a kernel forgets to write shows up), on fresh standard-normal
inputs, against the float64 reference executor run on the compiled (fused) IR
with the roundings the kernels make (``rounding="groups"``), compared
elementwise at each result's own element type (``tests/numerics.py``). The
compiled IR must compute the same float64 maths as the IR as written.
"""

from __future__ import annotations

import numpy as np
from numerics import assert_close
from xdsl.dialects import func
from xdsl.ir import Block, Region

from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai
from fusec.ir.module import entry_function
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import Program
from fusec.runtime.reference import run_reference
from fusec.tools import runner


def poison(shape, dtype) -> np.ndarray:
    """NaN, or for an integer dtype a value no test computes (bools: True)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.ones(shape, dtype)
    if dtype.kind in "iu":
        return np.full(shape, np.iinfo(dtype).min + 7, dtype=dtype)
    return np.full(shape, np.nan, dtype=dtype)


def wrap_group(text: str, kind: str):
    """Parse ``text`` (one function of ai ops) and put all its ops in one ai.fused group
    (``arith.constant`` ops stay before it, operands of the group, as a model's weights)."""
    module = parse(text)
    fn = entry_function(module)
    block = fn.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    constants = [op.results[0] for op in block.ops if op.name == "arith.constant"]
    ops = [op for op in block.ops if op is not ret and op.name != "arith.constant"]
    operands = [*block.args, *constants]
    body = Block(arg_types=[a.type for a in operands])
    mapper = dict(zip(operands, body.args, strict=True))
    for op in ops:
        body.add_op(op.clone(value_mapper=mapper))
    body.add_op(ai.YieldOp(*[mapper[v] for v in ret.arguments]))
    fused = ai.FusedOp(kind, operands, [v.type for v in ret.arguments], Region(body))
    block.insert_op_before(fused, ret)
    for i, _ in enumerate(ret.arguments):
        ret.operands[i] = fused.results[i]
    for op in reversed(ops):
        op.detach()
        op.erase()
    module.verify()
    return module


def check(
    module_or_text,
    *,
    cache: KernelCache,
    kind: str | None = None,
    fuse: bool = False,
    seed: int = 0,
) -> Program:
    """Compile for cpu, run poisoned on random inputs and assert every result matches.

    ``kind`` wraps the whole function in one group of that kind; ``fuse`` runs
    the default pipeline instead; neither means the IR is already fused.
    """
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    if kind is not None:
        module = wrap_group(text, kind)
    else:
        module = parse(text)
        if fuse:
            run_pipeline(module)
    program = Program(module, target="cpu", cache=cache)
    fn = entry_function(module)
    inputs = runner.random_inputs(fn, seed)
    outputs = program(inputs, alloc=poison)
    # the compiled groups' own rounding points: float32 inside a group, rounding at
    # its casts and results, so a cast that does not round fails at f32 tolerance
    references = run_reference(module, inputs, precision="float64", rounding="groups")
    for k, (out, ref) in enumerate(zip(outputs, references, strict=True)):
        assert_close(out, ref, what=f"result #{k}")
    # and the passes (fusion included) kept the maths of the IR as written
    exact = run_reference(module, inputs, precision="float64")
    written = run_reference(parse(text), inputs, precision="float64")
    for k, (new, old) in enumerate(zip(exact, written, strict=True)):
        np.testing.assert_allclose(new, old, rtol=1e-9, atol=1e-9, err_msg=f"result #{k}")
    return program
