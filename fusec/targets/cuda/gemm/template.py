"""The cuda target's ``matmul`` template: one Hopper GEMM per ``ai.fused "matmul"`` group.

A group is generated as the Tensor Core kernel when it is

    [ai.layernorm on A] -> ai.matmul -> elementwise* -> [ai.softmax (last axis) -> elementwise*]

with both matmul operands f16 or bf16 (same type), rank >= 2, leading (batch)
dims either the output's or all 1 (broadcast), and every op after the matmul of
the output's shape. The parts map onto the kernel as follows:

* the elementwise tail (bias, activations, residual add, scale, casts) is the
  GEMM epilogue, rendered to C++ by ``CppExprGenerator`` and run on the f32
  accumulators before the one rounding to the output type;
* a LayerNorm prologue (``layernorm(x) @ W`` with W not batched) is the exact
  rewrite ``rstd_i * (x @ W' - mu_i * c) + d`` (``aux.LayerNormPrep``: one
  light pre-pass computes the row statistics of x and folds gamma and beta
  into W', c, d; the GEMM reads the raw x and applies the rewrite in its
  epilogue); or, with the opt-in ``ln=tile`` variant where the whole K fits
  the pipeline, the GEMM normalises its resident A tiles in shared memory
  before its main loop (one launch; the LayerNorm output rounded to the
  operand type, as PyTorch eager computes it);
* a softmax over rows of at most 256 columns runs in the epilogue (the block
  tile holds whole rows: ``choose_row_config``; row max and sum by quad
  shuffles on the accumulator layout); longer rows store the logits with
  per-tile (max, sum of exp) partials, and ``aux.SoftmaxFinalise`` rewrites
  them in place (two launches, the logits read once, in 16 bits).

f32 operands run on the Tensor Cores only when the module asks for tf32 maths
(``fusec.compile(..., precision="tf32")``: the module's ``fusec.precision``
attribute, issue 28): then the kernel reads them as tf32 (``wgmma ... k8 .tf32``,
f32 accumulation, a tile of BK = 32: ``config.as_tf32``). wgmma reads tf32 operands
K-major only: a B stored K x N (the plain ``a @ b``) or an A stored K x M
(``transpose_a``) is first copied K-major into a scratch buffer (``aux.TransposeF32``,
one light launch each); a LayerNorm prologue of f32 operands stays on the fallback.

Float8 operands (issue 31): a group ``dequantize(qa, 1, 0)``, ``dequantize(qb, 1, 0)`` ->
matmul -> elementwise* [-> quantize to float8], both codes group inputs of a float8 type
(e4m3 or e5m2, the same or one each), is the GEMM on the codes (``wgmma ... k32 .e4m3``,
f32 accumulation, a tile of BK = 128: ``config.as_fp8``). wgmma reads float8 K-major only:
an A stored K x M or a B stored K x N is first copied K-major (``aux.TransposeCodes``, one
light launch each) as for tf32. ``recognize-patterns`` has moved the quantization scales
after the product (``ScalesAfterQuantizedMatmul``), so they ride in the epilogue with the
rest; a saturating quantize to float8 codes ending the group is the store
(``fp8_plan.float8_output_problem``).

An int4 weight (issue 31's W4A16 beyond the rows ``gemm/w4.py``'s route takes): a group
``dequantize(constant 4-bit codes, scale, zero point)`` as the matmul's B -> elementwise*
is the GEMM that dequantizes the codes itself (``cpp.W4B``, ``w4.gemm_weight``): B
K-major, the codes packed at load; up to ``w4.PRODUCER_MAX_ROWS`` rows its producer
warpgroup writes each B stage dequantized, past them its consumers dequantize into wgmma's
A registers (``w4.gemm_route``, measured; plain K-major activations and epilogue only,
else the producer's way). ``$FUSEC_W4_GEMM=separate`` makes the dequantize a kernel of its
own (fusion refuses the group); a group that holds one is planned either way.

Everything else (f32 graphs, which keep IEEE f32 maths by default; partial batch
broadcasting; 1-D operands; other prologues) is served by the PyTorch fallback
(``fusec.targets.cuda.torch_fallback``), whose kernel header says why.

The tile configuration comes from the ``fusec.tile`` attribute the
``tile-gemm`` pass writes on the group, or the same heuristic when absent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from xdsl.ir import Operation, SSAValue

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import (
    ELEMENTWISE_OPS,
    broadcast_offset,
    error_at,
    header,
    leaf_shapes,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.module import precision_of
from fusec.targets.cuda.caps import H200
from fusec.targets.cuda.common import as_packed, body_ops, integer_values, kernel_name
from fusec.targets.cuda.cpp_expr import CppExprGenerator
from fusec.targets.cuda.gemm import aux, w4, w4_mma
from fusec.targets.cuda.gemm.config import (
    TileConfig,
    as_fp8,
    as_tf32,
    choose_config,
    choose_row_config,
    from_attr,
    heuristic_split,
    ln_tile_problem,
    with_variant,
)
from fusec.targets.cuda.gemm.cpp import W4B, Epilogue, GemmSpec, registers_tile_problem
from fusec.targets.cuda.gemm.fp8_plan import (
    float8_output_problem,
    float8_output_scale_index,
    fp8_operands,
)
from fusec.targets.cuda.linked import loads_early

TILE_ATTR = "fusec.tile"
_DTYPES = ("f16", "bf16")
ROW_SOFTMAX_LIMIT = 256  # widest row one block tile holds (BN <= 256)


@dataclass(frozen=True)
class GemmPlan:
    """How a group maps onto the kernel: the problem and the operand storage."""

    matmul: ai.MatmulOp
    epilogue_ops: tuple  # between the matmul and the softmax (or the end)
    m: int
    n: int
    k: int
    batches: int
    folded: bool  # A's batch dims folded into M (B is not batched)
    a_major: str
    b_major: str
    a: tuple[int, int, int, int]  # (input index, stored rows, cols, batch)
    b: tuple[int, int, int, int]
    batch_a: bool
    batch_b: bool
    layernorm: ai.LayerNormOp | None = None
    softmax: ai.SoftmaxOp | None = None
    post_ops: tuple = ()  # after the softmax
    tf32: bool = False  # f32 operands run as tf32 (the module's precision is "tf32")
    fp8: str = ""  # the float8 type of A's codes (dequantize prologues), or ""
    fp8_b: str = ""  # ... of B's codes where it differs from A's (e4m3 x e5m2), or ""
    #: the group's last op, a quantize of the result to float8 codes (per-tensor scale,
    #: zero point 0, saturating): its division in the epilogue, the conversion at the
    #: store (``Float8::st2``, cvt.rn.satfinite), float8 codes out; or None
    quantize: ai.QuantizeOp | None = None
    #: B an int4 weight the producer dequantizes (``w4.gemm_weight``), or None
    w4: w4.GemmWeight | None = None

    @property
    def softmax_mode(self) -> str:
        if self.softmax is None:
            return ""
        return "row" if self.n <= ROW_SOFTMAX_LIMIT else "partials"


def _split_softmax(rest: list) -> tuple[list, ai.SoftmaxOp | None, list] | str:
    softmaxes = [k for k, op in enumerate(rest) if isinstance(op, ai.SoftmaxOp)]
    if len(softmaxes) > 1:
        return "more than one softmax after the matmul"
    if not softmaxes:
        return rest, None, []
    k = softmaxes[0]
    softmax = rest[k]
    rank = len(spec_of(softmax.output.type).shape)
    if softmax.attr("axis") % rank != rank - 1:
        return "a softmax over an axis other than the last"
    return rest[:k], softmax, rest[k + 1 :]


def plan(fused_op: ai.FusedOp) -> GemmPlan | str:
    """The kernel's view of ``fused_op``, or why the group needs the fallback.

    This is the template's one acceptance rule (``plan_ops``): fusion asks it of the
    members it would pack (``accepts``), code generation of the packed group, so a group
    fusion formed never falls back here (tests/targets/cuda/test_template_plans.py)."""
    args: dict[SSAValue, int] = {arg: i for i, arg in enumerate(fused_op.block.args)}
    return plan_ops(body_ops(fused_op), args, len(fused_op.results))


def plan_ops(
    ops: Sequence[Operation],
    args: Mapping[SSAValue, int],
    results: int,
    precision: str | None = None,
) -> GemmPlan | str:
    """The plan of a group of ``ops`` (in block order) whose inputs are ``args`` (value ->
    group input index) and which writes ``results`` values, or why the kernel cannot.
    ``precision``: the maths of f32 operands (None: the module's, ``precision_of``)."""
    ops = list(ops)
    if precision is None:
        precision = precision_of(ops[0]) if ops else "ieee"
    weight: w4.GemmWeight | None = None
    four_bit = [op for op in ops if isinstance(op, ai.DequantizeOp) and w4.is_four_bit(op)]
    if four_bit:
        found_weight = w4.gemm_weight(four_bit, args)
        if isinstance(found_weight, str):
            return f"an int4 weight: {found_weight}"
        weight = found_weight
        ops = [op for op in ops if op is not weight.dequantize]
    blocked = next(
        (op for op in ops if isinstance(op, ai.QuantizationOp) and op.blocks() is not None), None
    )
    if blocked is not None:
        return f"{blocked.name} has per-block scales (the pointwise kernel reads them)"
    dequantized = [op for op in ops if isinstance(op, ai.DequantizeOp)]
    codes: dict[SSAValue, SSAValue] = {}  # a matmul operand -> the float8 codes it reads
    fp8 = fp8_b = ""
    if dequantized:
        found = fp8_operands(dequantized, ops, args)
        if isinstance(found, str):
            return found
        types, codes = found
        ops = [op for op in ops if op not in dequantized]
    quantize = ops[-1] if ops and isinstance(ops[-1], ai.QuantizeOp) else None
    if quantize is not None:
        if (problem := float8_output_problem(quantize, ops)) is not None:
            return problem
        ops = ops[:-1]
    if (reason := integer_values(ops, "the cuda Tensor Core GEMM")) is not None:
        return reason
    layernorm = ops[0] if ops and isinstance(ops[0], ai.LayerNormOp) else None
    core = ops[1:] if layernorm is not None else ops
    matmuls = [op for op in core if isinstance(op, ai.MatmulOp)]
    if len(matmuls) != 1 or core[0] is not matmuls[0]:
        return "the group is not [layernorm ->] matmul -> elementwise/softmax ops"
    matmul = matmuls[0]
    split = _split_softmax(list(core[1:]))
    if isinstance(split, str):
        return split
    pre, softmax, post = split
    allowed = all(isinstance(op, ELEMENTWISE_OPS) for op in (*pre, *post))
    if results != 1 or not allowed:
        return "the epilogue is not a chain of elementwise ops (and one softmax) with one result"
    if dequantized and (layernorm is not None or set(codes) != {matmul.lhs, matmul.rhs}):
        return "float8 codes: both matmul operands are dequantized, no LayerNorm prologue"
    if weight is not None:
        if matmul.rhs is not weight.dequantize.output or layernorm is not None or dequantized:
            return "an int4 weight: the matmul's B, no LayerNorm prologue or float8 operands"
        codes[matmul.rhs] = weight.dequantize.input
    if dequantized:
        fp8, fp8_b = types[matmul.lhs], types[matmul.rhs]
        fp8_b = "" if fp8_b == fp8 else fp8_b
    lhs_value = layernorm.input if layernorm is not None else codes.get(matmul.lhs, matmul.lhs)
    rhs_value = codes.get(matmul.rhs, matmul.rhs)
    if layernorm is not None:
        if matmul.lhs is not layernorm.output or matmul.rhs is layernorm.output:
            return "the LayerNorm does not feed only the matmul's left operand"
        if any(v not in args for v in (layernorm.input, layernorm.gamma, layernorm.beta)):
            return "a LayerNorm operand is computed inside the group"
    if lhs_value not in args or rhs_value not in args:
        return "a matmul operand is computed inside the group"
    lhs, rhs, res = (spec_of(v.type) for v in (matmul.lhs, matmul.rhs, matmul.output))
    tf32 = precision == "tf32" and lhs.dtype == rhs.dtype == "f32"
    if (lhs.dtype not in _DTYPES or rhs.dtype != lhs.dtype) and not (tf32 or fp8):
        return f"operands {lhs.dtype} x {rhs.dtype}: the Tensor Core kernel takes f16 or bf16"
    if tf32 and (problem := _tf32_problem(matmul, layernorm)) is not None:
        return problem
    if len(lhs.shape) < 2 or len(rhs.shape) < 2:
        return "a 1-D operand"
    out_shape = res.shape
    if any(spec_of(op.results[0].type).shape != out_shape for op in (*pre, *post)) or (
        softmax is not None and spec_of(softmax.output.type).shape != out_shape
    ):
        return "an epilogue op broadcasts beyond the matmul's shape"
    ta, tb = bool(matmul.attr("transpose_a")), bool(matmul.attr("transpose_b"))
    m, n = out_shape[-2], out_shape[-1]
    k = lhs.shape[-2] if ta else lhs.shape[-1]
    out_batch = out_shape[:-2]
    batches = math.prod(out_batch)
    batch_of = {}
    for name, shape in (("a", lhs.shape[:-2]), ("b", rhs.shape[:-2])):
        count = math.prod(shape)
        if count != 1 and (1,) * (len(out_batch) - len(shape)) + tuple(shape) != out_batch:
            return "partially broadcast batch dims"
        batch_of[name] = count > 1
    if 0 in (m, n, k):
        return "an empty dimension"
    folded = batch_of["a"] and not batch_of["b"] and not ta
    if layernorm is not None and (ta or len(rhs.shape) != 2):
        return "a LayerNorm prologue needs a plain (not transposed) A and a 2-D B"
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    if weight is not None:  # the packed codes: words [N][K / 8], read K-major
        tb, b_rows, b_cols = True, n, k // 8
    a_batch = batches if batch_of["a"] else 1
    b_batch = batches if batch_of["b"] else 1
    if folded:
        a_rows, a_batch = batches * m, 1
    rows = batches * m if folded else m
    if weight is not None and w4.gemm_route(rows) == "consumer":
        # the consumers' registers take plain K-major activations and a plain epilogue;
        # other groups keep the producer's way (the route is a choice of kernel, both exact)
        plain = not ta and a_batch == 1 and layernorm is None and softmax is None
        weight = replace(weight, in_registers=plain)
    return GemmPlan(
        matmul,
        tuple(pre),
        rows,
        n,
        k,
        1 if folded else batches,
        folded,
        "m" if ta else "k",
        "k" if tb else "n",
        (args[lhs_value], a_rows, a_cols, a_batch),
        (args[rhs_value], b_rows, b_cols, b_batch),
        batch_of["a"] and not folded,
        batch_of["b"],
        layernorm,
        softmax,
        tuple(post),
        tf32,
        fp8,
        fp8_b,
        quantize,
        weight,
    )


def _tf32_problem(matmul: ai.MatmulOp, layernorm: ai.LayerNormOp | None) -> str | None:
    """Why the tf32 kernel cannot take an f32 matmul (``precision="tf32"``), or None: the
    LayerNorm prologue normalises 16-bit tiles (MN-major operands are copied K-major)."""
    if layernorm is not None:
        return "precision=tf32: a LayerNorm prologue of f32 operands"
    return None


def plan_members(members: Sequence[Operation]) -> GemmPlan | str:
    """``plan_ops`` of the group fusion would pack from ``members`` (flat ops of one
    block): the same body order, inputs and results as ``outline.pack`` gives it."""
    ordered, inputs, results = as_packed(members)
    return plan_ops(ordered, inputs, results)


def accepts(members: Sequence[Operation], anchor: Operation | None) -> str | None:
    """Whether the Tensor Core GEMM computes a matmul group of ``members``
    (``Template.accepts`` of the cuda target): ``plan_members``, so fusion forms no group
    that code generation would hand to PyTorch, where fused work runs op by op, slower
    than a separate kernel. A plan with a LayerNorm prologue the GEMM serves more slowly
    than a kernel of its own is refused too (``layernorm_prologue_problem``)."""
    if len(members) == 1 or not isinstance(anchor, ai.MatmulOp):
        return None
    if any(w4.is_four_bit(op) for op in members):
        problem = w4.members_problem(members)  # a few rows: the W4A16 route
        if problem is None:
            return None
        rows = math.prod(spec_of(anchor.lhs.type).shape[:-1])
        if w4.gemm_route(rows) == "separate":  # asked for: a dequantize kernel, then the GEMM
            return (
                f"the cuda W4A16 route cannot take the group ({problem}); the dequantize is "
                f"a kernel of its own (${w4.GEMM_ROUTE_ENV}=separate)"
            )
        gemm = plan_members(members)  # the GEMM dequantizing the weight as it loads it
        if isinstance(gemm, str):
            return f"the cuda W4A16 route ({problem}) and Tensor Core GEMM ({gemm}) cannot take it"
        return None
    p = plan_members(members)
    if isinstance(p, str):
        return f"the cuda Tensor Core GEMM cannot take the group ({p}), {_FALLBACK}"
    if p.layernorm is not None:
        return layernorm_prologue_problem(p.n, p.k)
    return None


_FALLBACK = "so the group would run op by op through PyTorch"
LN_SPLIT_MIN_K = 768  # the LayerNorm rows measured faster as a kernel of their own
LN_SPLIT_WIDE = 4  # ... and at any K, an output this many times wider than K


def layernorm_prologue_problem(n: int, k: int) -> str | None:
    """Why ``LN(x) @ W`` (x: M x K, W: K x N) runs faster as two kernels, or None.

    In the GEMM the LayerNorm costs the rewrite ``rstd * (acc - mu * c) + d`` on every
    output element (M x N) plus a pre-pass over x and W; as a kernel of its own it costs
    one read and one write of x (M x K), and the GEMM reads the normalised x. With
    N >= K the kernel of its own wins (H200, 2026-12-01: MLP 8192x1024 -> 4096, 242.0
    against 257.5 us of kernels; LN(8192x4096) -> matmul 4096x4096 -> softmax, 0.473
    against 0.490 ms; 2026-12-02, K = 768 with constant weights as in GPT-2, BERT and
    ViT-B/16, graph replays of the whole program: 0.39-0.56 of the folded GEMM's time from
    128 x 768 -> 2304 to 6304 x 768 -> 3072, ``benchmarks/results/gemm-ln-ab.md``).
    Shorter rows split too where the output is ``LN_SPLIT_WIDE`` times wider than K, an
    MLP's up projection (2026-12-03, ConvNeXt-T's at batch 32: 0.43-0.51 of the folded
    time from 100352 x 96 -> 384 to 6272 x 384 -> 1536, ``gemm-ln-ab-convnext.md``).
    Other short rows keep the prologue (their whole rows fit the pipeline, ``ln=tile``,
    or the pre-pass is small), unmeasured.
    """
    if n < k or (k < LN_SPLIT_MIN_K and n < LN_SPLIT_WIDE * k):
        return None
    return (
        f"the cuda Tensor Core GEMM leaves a LayerNorm over K = {k} to a kernel of its own: "
        f"its output is N = {n} >= K wide, and normalising x once costs less than the "
        "LayerNorm rewrite on every output element"
    )


def heuristic_config(p: GemmPlan, sms: int = H200.sms) -> tuple[TileConfig, str]:
    """(config, why) chosen from the problem shape and the GPU's SM count, with the
    variants that pay for what the group holds (measured on the H200,
    benchmarks/results/profile.md): a whole-row tile with a LayerNorm prologue
    normalises its resident A rows in the kernel when the whole K fits the pipeline
    (``ln="tile"`` with the staged epilogue: LN(8192x256) -> matmul -> softmax in one
    launch, 11.8 us against 21.2 for the pre-pass, the GEMM and a memset), else stages the
    rewrite's vectors in shared memory (GEMM 24.2 -> 12.9 us); an epilogue that reads an
    output-shaped input (a residual) has it prefetched into L2 on the two-consumer tiles
    (MLP down + bias + residual: 105.1 -> 102.2 us), not on the small-M ones, where it
    lost (gemm-epilogue-ab-b1.md: BERT-base b1 MLP down 14.7 against 13.7 us, ConvNeXt-T
    b1 stage-4 MLP down 16.0 against 13.6, BERT-base b1 attention out 8.5 against 8.1)."""
    config, why = _heuristic_config(p, sms)
    return fit_operands(p, config), why


def fit_operands(p: GemmPlan, config: TileConfig) -> TileConfig:
    """``config`` for the plan's operands: the tf32 tile (bk = 32) for f32 operands run as
    tf32, the float8 tile (bk = 128) for float8 codes, the 16-bit tile (bk = 64) otherwise
    (a tuned record or a forced tile names one)."""
    if p.quantize is not None:  # float8 codes out: the direct epilogue's stores
        config = with_variant(config, replace(config.variant, epilogue="direct", loop="unrolled"))
    if p.tf32:
        return as_tf32(config)
    return as_fp8(config) if p.fp8 else replace(config, bk=64)


def _heuristic_config(p: GemmPlan, sms: int) -> tuple[TileConfig, str]:
    if p.w4 is not None and p.w4.in_registers:
        return w4_registers_config(p.m, p.n, p.k, sms), "int4 weight in the consumers' registers"
    if p.softmax_mode == "row":
        config, why = choose_row_config(p.m, p.n, p.batches, sms), "row softmax"
        if p.layernorm is not None:
            in_kernel = _in_kernel_layernorm(config, p.k)
            if in_kernel is not None:
                return in_kernel, why
            config = with_variant(config, replace(config.variant, vectors="smem"))
        return config, why
    three = not (p.tf32 or p.fp8 or p.w4)  # (int4 B: its producer takes more registers)
    config = choose_config(p.m, p.n, p.k, p.batches, sms, three_consumers=three)
    if _reads_output_shaped_input(p) and config.consumers == 2:
        config = with_variant(config, replace(config.variant, prefetch="tile"))
    if config.epilogue == "smem" and heuristic_loop(p) == "rolled":
        config = with_variant(config, replace(config.variant, loop="rolled"))
    return config, "heuristic"


def w4_registers_config(m: int, n: int, k: int, sms: int = H200.sms) -> TileConfig:
    """The tile of a GEMM whose consumers dequantize its int4 weight (``gemm_w4_rs.cuh``):
    64 weight columns a consumer warpgroup (two: the ``w4rs`` chunk's 128), the rows of
    activations wgmma's N (256 from 1024 rows, else 128: a tile's rows are a multiple of
    64 per consumer, as ``TileConfig`` checks for every tile), direct stores; K split as
    the heuristic splits an under-filled GEMM's (``split_k_for``: few tiles of a deep K)."""
    config = TileConfig(256 if m >= 1024 else 128, 128, 64, 4, 2, 8)
    return heuristic_split(config, m, n, k, 1, sms)


#: Which groups the heuristic gives the rolled epilogue (``loop="rolled"``):
#: ``FUSEC_GEMM_LOOP=auto``, the default, the groups whose epilogue calls a transcendental
#: function (exact or tanh GELU, SiLU, sigmoid, exp, tanh, erf: tens of instructions an
#: element, unrolled over the tile into ~87 KB of SASS); ``unrolled`` none; ``rolled``
#: every group that can. Measured on the H200 (benchmarks/results/gemm-code-cache.md): the
#: unrolled bias + GELU GEMM runs 21-46% slower beside other kernels' code than alone
#: (ConvNeXt-T's stage-3 MLP up 27.9 us alone, 40.7 after the MLP down) where the rolled one
#: keeps its time (29.0-29.1 us); ConvNeXt-T b32's GPU work 2400 -> 2222 us with ``auto``,
#: 2195 with ``rolled`` (whose residual-only epilogues win and lose a few us each).
LOOP_ENV = "FUSEC_GEMM_LOOP"
LOOP_DEFAULT = "auto"
_TRANSCENDENTAL = (ai.GeluOp, ai.SiluOp, ai.SigmoidOp, ai.ExpOp, ai.TanhOp, ai.ErfOp)


def heuristic_loop(p: GemmPlan) -> str:
    """The epilogue loop ``$FUSEC_GEMM_LOOP`` asks the heuristic for on group ``p``."""
    from fusec.environ import getenv
    from fusec.errors import FusecError

    value = getenv(LOOP_ENV, LOOP_DEFAULT).strip().lower()
    if value not in ("unrolled", "auto", "rolled"):
        raise FusecError(f"{LOOP_ENV}={value!r}: expected unrolled, auto or rolled")
    if value == "unrolled" or rolled_problem(p) is not None:
        return "unrolled"
    if value == "auto" and not any(isinstance(op, _TRANSCENDENTAL) for op in p.epilogue_ops):
        return "unrolled"
    return "rolled"


def _in_kernel_layernorm(config: TileConfig, k: int) -> TileConfig | None:
    """``config`` normalising its resident A rows (``ln="tile"``, staged epilogue), or None
    when K does not fit its pipeline or the staging does not fit its shared memory."""
    try:
        tiled = with_variant(config, replace(config.variant, ln="tile", epilogue="smem"))
    except ValueError:  # the staged epilogue leaves too little shared memory
        return None
    if tiled.problems() or ln_tile_problem(tiled, k) is not None:
        return None
    return tiled


def _reads_output_shaped_input(p: GemmPlan) -> bool:
    """An epilogue op reads a value of the output's shape that the chain did not make."""
    made = {p.matmul.output} | {r for op in p.epilogue_ops for r in op.results}
    shape = spec_of(p.matmul.output.type).shape
    return any(
        v not in made and spec_of(v.type).shape == shape
        for op in p.epilogue_ops
        for v in op.operands
    )


def rolled_problem(p: GemmPlan) -> str | None:
    """Why the group's epilogue cannot run rolled over staged values (``loop="rolled"``
    rounds the accumulators to the output type first), or None when it can."""
    if p.layernorm is not None:
        return "loop=rolled rounds the accumulators first: not with a LayerNorm prologue"
    if p.softmax is not None:
        return "loop=rolled runs the epilogue per element: not with a softmax"
    return None


def tile_config(fused_op: ai.FusedOp, p: GemmPlan, sms: int = H200.sms) -> TileConfig:
    """The group's ``fusec.tile`` (checked against the plan), else the heuristic's choice."""
    attr = fused_op.attributes.get(TILE_ATTR)
    if attr is None:
        return heuristic_config(p, sms)[0]
    try:
        config = from_attr(attr)
    except ValueError as err:
        raise error_at(fused_op, f"has a bad {TILE_ATTR} attribute: {err}") from None
    if config.tf32 != p.tf32:
        operands = "f32 operands run as tf32" if p.tf32 else "16-bit operands"
        raise error_at(
            fused_op,
            f"has {TILE_ATTR} {config.text!r}, but its {operands} need a "
            f"{'tf32 tile (BK = 32)' if p.tf32 else '16-bit tile (BK = 64)'}",
        )
    if p.softmax_mode == "row" and config.bn < p.n:
        raise error_at(
            fused_op,
            f"has {TILE_ATTR} with a {config.bn}-wide block, but its row softmax needs the "
            f"whole {p.n}-wide row in one block",
        )
    rolled = rolled_problem(p) if config.loop == "rolled" else None
    if rolled is not None:
        raise error_at(fused_op, f"has {TILE_ATTR} {config.text!r}: {rolled}")
    if p.quantize is not None and (config.epilogue, config.loop) != ("direct", "unrolled"):
        raise error_at(
            fused_op,
            f"has {TILE_ATTR} {config.text!r}, but its float8 output is stored by the direct "
            "epilogue, unrolled",
        )
    if p.w4 is not None and p.w4.in_registers:
        if (problem := registers_tile_problem(config)) is not None:
            raise error_at(
                fused_op,
                f"has {TILE_ATTR} {config.text!r}, but its int4 weight is dequantized in the "
                f"consumers' registers: {problem}",
            )
    if config.ln == "tile":
        problem = (
            "ln=tile needs a LayerNorm prologue"
            if p.layernorm is None
            else ln_tile_problem(config, p.k)
        )
        if problem is not None:
            raise error_at(fused_op, f"has {TILE_ATTR} {config.text!r}: {problem}")
    return config


class _Inputs:
    """The extra pointers an epilogue reads (``e0, e1...``): group inputs and scratch."""

    def __init__(self) -> None:
        self.sources: list[int | str] = []
        self.dtypes: list[str] = []
        #: slots of inputs read at (row, col) of a 2-D output with its shape (a residual):
        #: row-major M x N, which the "tile" prefetch can bring into L2 ahead of the epilogue
        self.tiles: list[int] = []

    def slot(self, source: int | str, dtype: str) -> int:
        if source not in self.sources:
            self.sources.append(source)
            self.dtypes.append(dtype)
        return self.sources.index(source)


def _index_lines(p: GemmPlan, out_shape: tuple) -> list[str]:
    rank = len(out_shape)
    if p.folded:  # row runs over (batch dims..., M)
        lines = _decompose("row", out_shape[:-1], 0)
    else:
        lines = _decompose("bat", out_shape[:-2], 0)
        lines.append(f"const long long i{rank - 2} = row;")
    lines.append(f"const long long i{rank - 1} = col;")
    return lines


def _row_view(p: GemmPlan, out_shape: tuple, ops) -> tuple[int, int] | None:
    """The output of a folded plan (``row`` runs over its leading dims) as ``(rows, N)``,
    when every value the epilogue reads can be indexed in that view: the whole output
    (``row * N + col``), a vector over its columns (leading dims all 1) or one over its
    rows (last dim 1, the others whole). Else None: the leading dims are decomposed.

    The decomposition costs a 64-bit division and remainder per dim and element, on every
    element of the tile: ConvNeXt-T's NHWC GEMMs with a residual (``[32, 56, 56, 96]``)
    spent twice the 2-D GEMM's time in the epilogue (H200, 121 against 64 us a call)."""
    if not p.folded or len(out_shape) <= 2:
        return None
    rows = math.prod(out_shape[:-1])
    for shape in (leaf_shapes(ops) if ops else {}).values():
        if _collapsed(shape, out_shape) is None:
            return None
    return (rows, out_shape[-1])


def _collapsed(shape: tuple, out_shape: tuple) -> tuple[int, int] | None:
    """``shape`` (broadcast to ``out_shape``) in the ``(rows, N)`` view, or None."""
    full = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    rows = math.prod(out_shape[:-1])
    if full == tuple(out_shape):
        return (rows, out_shape[-1])
    if all(d == 1 for d in full[:-1]):
        return (1, full[-1])
    if full[-1] == 1 and full[:-1] == tuple(out_shape[:-1]):
        return (rows, 1)
    return None


def _chain(
    fused_op,
    ops,
    inputs: _Inputs,
    gen: CppExprGenerator,
    leaves: dict,
    out_shape: tuple,
    view: tuple[int, int] | None = None,
):
    """C++ statements of ``ops`` and the name of their last value; ``leaves`` maps values
    computed elsewhere (the accumulator, the softmax value) to C++ names. With ``view``
    (``_row_view``) the leaves are indexed in the ``(rows, N)`` view of ``out_shape``."""
    shapes = leaf_shapes(ops) if ops else {}
    if view is not None:
        views = {v: _collapsed(shape, out_shape) for v, shape in shapes.items()}
        shapes = {v: shape for v, shape in views.items() if shape is not None}
        assert len(shapes) == len(views), "_row_view gives a view only where all leaves have one"
        out_shape = view
    rank = len(out_shape)
    index_vars = [f"i{d}" for d in range(rank)]
    args = {arg: index for index, arg in enumerate(fused_op.block.args)}

    def leaf(value) -> str:
        if value in leaves:
            return leaves[value]
        dtype = spec_of(value.type).dtype
        slot = inputs.slot(args[value], dtype)
        if rank == 2 and tuple(shapes[value]) == tuple(out_shape) and slot not in inputs.tiles:
            inputs.tiles.append(slot)
        offset = broadcast_offset(out_shape, shapes[value], index_vars)
        return f"fs_ld_{dtype}(e{slot}, {offset})"

    stmts, names = gen.chain(ops, leaf)
    return stmts, names


def epilogue(
    fused_op: ai.FusedOp, p: GemmPlan, fast_math: bool = False, ln_tile: bool = False
) -> tuple[Epilogue, tuple, tuple[aux.SoftmaxFinalise, tuple] | None]:
    """The group's ops after the matmul as C++ on ``acc`` at output element (bat, row, col):
    the GEMM epilogue, the sources of its extra inputs (``e0, e1...``), and the finalise
    pass of a long-row softmax (with its own inputs) or None. ``fast_math``: the GEMM's
    epilogue uses the hardware approximations (``CppExprGenerator``); ``ln_tile``: the
    LayerNorm prologue is applied to the A tiles (``ln="tile"``: gamma and beta are extra
    inputs of the kernel, the epilogue has no rewrite)."""
    out_shape = spec_of(p.matmul.output.type).shape
    view = _row_view(p, out_shape, (*p.epilogue_ops, *p.post_ops))
    if view is not None:
        lines = ["const long long i0 = row;", "const long long i1 = col;"]
    else:
        lines = _index_lines(p, out_shape)
    inputs = _Inputs()
    gen = CppExprGenerator(fast_math=fast_math)
    acc = "acc"  # with a LayerNorm prologue, the rewrite has been applied to it (``cpp``)
    fields: dict = {}  # the Epilogue's LayerNorm and prefetch fields
    if p.layernorm is not None and ln_tile:
        ln, args = p.layernorm, {arg: i for i, arg in enumerate(fused_op.block.args)}
        affine = tuple(inputs.slot(args[v], spec_of(v.type).dtype) for v in (ln.gamma, ln.beta))
        fields = {"ln_affine": affine, "ln_eps": float(ln.attr("epsilon"))}
    elif p.layernorm is not None:
        ln, args = p.layernorm, {arg: i for i, arg in enumerate(fused_op.block.args)}
        ln_slots = (inputs.slot("stats", "f32"), inputs.slot("cd", "f32"))
        dtype = spec_of(ln.input.type).dtype
        exact = (inputs.slot(args[ln.input], dtype), inputs.slot("w", dtype))
        fields = {
            "ln_slots": ln_slots,
            "ln_stride": cd_stride(p.n),
            "ln_exact": exact,
            "ln_kn": (p.k, p.n),
        }
    stmts, names = _chain(
        fused_op, p.epilogue_ops, inputs, gen, {p.matmul.output: acc}, out_shape, view
    )
    final = names[p.epilogue_ops[-1].results[0]] if p.epilogue_ops else acc
    if p.quantize is not None:  # x / scale in f32; the store rounds and saturates
        args = {arg: i for i, arg in enumerate(fused_op.block.args)}
        scale = p.quantize.scale
        dtype = spec_of(scale.type).dtype
        index = float8_output_scale_index(p.quantize)
        final = f"({final} / fs_ld_{dtype}(e{inputs.slot(args[scale], dtype)}, {index}))"
    body = "\n".join([*lines, *stmts, f"y = {final};"])
    fields["tile_inputs"] = tuple(inputs.tiles)
    ops = " -> ".join(op.name for op in (*p.epilogue_ops,)) or "identity"
    if p.quantize is not None:
        ops += f" -> ai.quantize (stored as {spec_of(p.quantize.output.type).dtype} codes)"
    if p.layernorm is not None:
        ops = f"layernorm {'in the A tiles' if ln_tile else 'rewrite'} -> {ops}"

    def main_epilogue(name: str, **softmax: Any) -> Epilogue:
        """The kernel's epilogue, named ``name`` (``softmax``: its softmax fields); its
        inputs and helpers as they stand when it is made."""
        return Epilogue(body, tuple(inputs.dtypes), name, gen.helper_source(), **softmax, **fields)

    if p.softmax is None:
        return main_epilogue(ops), tuple(inputs.sources), None
    post_inputs = _Inputs() if p.softmax_mode == "partials" else inputs
    post_gen = CppExprGenerator() if p.softmax_mode == "partials" else gen
    post_stmts, post_names = _chain(
        fused_op, p.post_ops, post_inputs, post_gen, {p.softmax.output: "s"}, out_shape, view
    )
    post_final = post_names[p.post_ops[-1].results[0]] if p.post_ops else "s"
    post_body = "\n".join([*lines, *post_stmts, f"y = {post_final};"])
    post_name = " -> ".join(op.name for op in p.post_ops) or "identity"
    if p.softmax_mode == "row":
        name = f"{ops} -> row softmax -> {post_name}"
        return main_epilogue(name, softmax="row", post_body=post_body), tuple(inputs.sources), None
    inputs.slot("partials", "f32")  # the kernel writes the partials to its last extra
    epi = main_epilogue(f"{ops} -> softmax partials", softmax="partials")
    out_dtype = spec_of(fused_op.results[0].type).dtype
    finalise = aux.SoftmaxFinalise(
        out_dtype, post_body, tuple(post_inputs.dtypes), post_gen.helper_source(), post_name
    )
    return epi, tuple(inputs.sources), (finalise, tuple(post_inputs.sources))


def cd_stride(n: int) -> int:
    """Where ``d`` starts in the fold's f32 column vectors (``c`` at 0): ``n`` rounded up
    to 4, so that both are 16-byte aligned (the staged vectors copy 16-byte chunks)."""
    return -(-n // 4) * 4


def _decompose(flat: str, dims, first: int) -> list[str]:
    """``const long long iN = ...`` for C-order dims ``dims`` of the flat index ``flat``."""
    lines = []
    stride = math.prod(dims)
    for d, size in enumerate(dims):
        stride //= size
        lines.append(f"const long long i{first + d} = ((long long){flat} / {stride}) % {size};")
    return lines


def _loads_constant_b(fused_op: ai.FusedOp, p: GemmPlan, ln_tile: bool) -> bool:
    """Whether the kernel reads B from a constant of the program (no LayerNorm pre-pass
    folding gamma into it, no K-major copy of it, no ln=tile A-first loads), so that it may
    load B before the grid dependency wait (``linked.loads_early``). A B whose rows are not
    16-byte aligned is read from a pitched copy (``host.GemmLaunch._pitched``): a memcpy on
    the stream, which a recorded graph keeps as a plain edge into the GEMM (only edges
    between two fusec kernels become programmatic), so the copy is done before it starts."""
    if ln_tile or p.layernorm is not None or ((p.tf32 or p.fp8) and p.b_major == "n"):
        return False  # B is the pre-pass's or the transpose's output
    if p.w4 is not None:
        return False  # the producer's 128 threads load an int4 B after the wait
    return loads_early(fused_op, p.b[0])


def gemm_spec(fused_op: ai.FusedOp, p: GemmPlan, config: TileConfig):
    """(GemmSpec, epilogue input sources, finalise or None, LayerNorm prep or None)."""
    out_dtype = spec_of(fused_op.results[0].type).dtype
    # approximate maths only where the result is rounded to 16 bits (or to float8 codes):
    # f32 outputs stay IEEE
    fast = config.math == "fast" and out_dtype in (*_DTYPES, "f8E4M3FN", "f8E5M2")
    ln_tile = p.layernorm is not None and config.ln == "tile"
    epi, sources, finalise = epilogue(fused_op, p, fast, ln_tile)
    dtype = p.fp8 or spec_of(p.matmul.lhs.type).dtype
    # tf32, float8: an operand stored MN-major is read from its K-major copy (``generate``)
    a_major, b_major = ("k", "k") if p.tf32 or p.fp8 else (p.a_major, p.b_major)
    spec = GemmSpec(config, dtype, out_dtype, a_major, b_major, p.batch_a, p.batch_b, epi, p.fp8_b)
    if p.w4 is not None:
        spec = replace(spec, w4=W4B(p.w4.block, p.w4.signed, p.w4.index, p.w4.in_registers))
    prep = None
    if _loads_constant_b(fused_op, p, ln_tile):
        spec = replace(spec, early_b=True)
    if p.layernorm is not None and not ln_tile:
        ln = p.layernorm
        prep = aux.LayerNormPrep(
            dtype,
            spec_of(ln.gamma.type).dtype,
            spec_of(ln.beta.type).dtype,
            p.b_major,
            float(ln.attr("epsilon")),
        )
    return spec, sources, finalise, prep


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The kernel module of a matmul group (the fallback's when the kernel cannot serve it)."""
    from fusec.targets.cuda import torch_fallback

    if w4.route_plan(fused_op) is not None:
        return w4_mma.generate(fused_op, name)
    name = kernel_name(name)
    p = plan(fused_op)
    if isinstance(p, str):
        return torch_fallback.generate(fused_op, name, reason=p)
    config = tile_config(fused_op, p)
    spec, sources, finalise, prep = gemm_spec(fused_op, p, config)
    args = {arg: i for i, arg in enumerate(fused_op.block.args)}
    b_operand: tuple = p.b
    prologue_text = "None"
    if prep is not None:
        ln = p.layernorm
        assert ln is not None
        prologue_text = (
            f"Prologue({prep!r}, x={args[ln.input]}, gamma={args[ln.gamma]}, "
            f"beta={args[ln.beta]}, w={p.b[0]})"
        )
        b_operand = ("w", *p.b[1:])
    finalise_text = "None" if finalise is None else f"Finalise({finalise[0]!r}, {finalise[1]!r})"
    a_operand: tuple = p.a
    # the tf32 and float8 GEMMs read an MN-major operand's K-major copy ("at", "bt")
    transposes = []
    copier = aux.TransposeF32() if p.tf32 else aux.TransposeCodes()
    if (p.tf32 or p.fp8) and p.a_major == "m":
        transposes.append(f"Transpose({copier!r}, {p.a[0]}, 'at')")
        a_operand = ("at", p.a[2], p.a[1], p.a[3])
    if (p.tf32 or p.fp8) and p.b_major == "n":
        transposes.append(f"Transpose({copier!r}, {p.b[0]}, 'bt')")
        b_operand = ("bt", p.b[2], p.b[1], p.b[3])
    transpose = copier if transposes else None
    notes = [
        f"target: cuda, Hopper Tensor Core GEMM (wgmma + TMA, sm_90a), tile {config.text};",
        f"M={p.m} N={p.n} K={p.k} batches={p.batches}, A {p.a_major.upper()}-major, "
        f"B {p.b_major.upper()}-major, {spec.dtype} -> {spec.out_dtype}, f32 accumulation;",
        *(
            ["precision: tf32 (f32 operands read as tf32 by wgmma k8; precision='tf32')"]
            if p.tf32
            else []
        ),
        *(
            [
                "float8 codes: wgmma k32 reads the dequantized operands' "
                + (f"{p.fp8} x {p.fp8_b}" if p.fp8_b else p.fp8)
                + " codes"
            ]
            if p.fp8
            else []
        ),
        *(
            [
                f"int4 weight: {'i4' if p.w4.signed else 'ui4'} codes packed at load "
                f"({p.w4.layout}), dequantized "
                + (
                    "by the consumers into wgmma's A registers (Y^T = W^T X^T), "
                    if p.w4.in_registers
                    else "into each B stage by the producer warpgroup, "
                )
                + f"scales and zero points per {p.w4.block} K"
            ]
            if p.w4
            else []
        ),
        f"epilogue on the accumulators: {spec.epilogue.name} (f32, one rounding at the store)",
    ]
    if prep is not None:
        notes.append("LayerNorm prologue: pre-pass (row statistics, gamma/beta folded into W)")
    elif p.layernorm is not None:
        notes.append("LayerNorm prologue: normalised in the resident A tiles (ln=tile)")
    if finalise is not None:
        notes.append("long-row softmax: per-tile partials in the epilogue, then a finalise pass")
    for name, scratch in (("A stored K x M", "'at'"), ("B stored K x N", "'bt'")):
        if any(t.endswith(f"{scratch})") for t in transposes):
            kind = "tf32" if p.tf32 else "float8"
            notes.append(f"{kind} {name}: copied K-major first (a transpose launch)")
    source = "\n".join(
        [
            header(fused_op, notes=notes),
            "from fusec.targets.cuda.abi import (",
            "    Epilogue, Finalise, GemmLaunch, GemmSpec, LayerNormPrep, Prologue,",
            "    SoftmaxFinalise, TileConfig,",
            *([f"    Transpose, {type(copier).__name__},"] if transposes else []),
            *(["    W4B,"] if p.w4 else []),
            ")",
            "",
            "GEMM = GemmLaunch(",
            f"    {spec!r},",
            f"    a={a_operand!r}, b={b_operand!r}, extras={sources!r},",
            f"    m={p.m}, n={p.n}, k={p.k}, batches={p.batches},",
            f"    prologue={prologue_text},",
            f"    finalise={finalise_text},",
            *([f"    transposes=({', '.join(transposes)},),"] if transposes else []),
            *([f"    w4=({p.w4.scale}, {p.w4.zero}),"] if p.w4 else []),
            ")",
            "",
            "",
            f"def launch({', '.join([*(f'in{k}' for k in range(len(fused_op.inputs))), 'out0'])}"
            f", stream=0, sms={H200.sms}):",
            f"    GEMM(({', '.join(f'in{k}' for k in range(len(fused_op.inputs)))},), out0, "
            "stream, sms)",
            "",
            "",
            "KERNELS = []  # linked cubins, launched by GemmLaunch (not Numba dispatchers)",
            f"GEMM_SPECS = [GEMM.spec]  # {spec.function_name}",
            "",
        ]
    )
    ins, outs = io_specs(fused_op)
    linked = [*([prep] if prep is not None else []), spec]
    linked += [finalise[0]] if finalise is not None else []
    linked = ([transpose] if transpose is not None else []) + linked
    cpp = tuple(("cuda-c++", kernel.cpp_source()) for kernel in linked)  # every linked kernel
    return KernelSource(
        name,
        "matmul",
        "cuda",
        source,
        ins,
        outs,
        array_dtype=None,
        extra_sources=cpp,
        specs=tuple(linked),
        prepared_inputs=((p.w4.codes, p.w4.layout),) if p.w4 else (),
    )


def linked_specs(kernel: KernelSource) -> list:
    """The generated-C++ kernels of a GEMM group's module, in launch order (LayerNorm
    pre-pass, GEMM, softmax finalise), or of a conv/attention/relayout module (its
    launcher's spec); [] for other modules (the fallback's, Numba's): ``kernel.specs``."""
    return list(kernel.specs)
