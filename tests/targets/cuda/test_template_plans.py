"""One acceptance rule per cuda template: fusion and code generation never disagree.

The Tensor Core GEMM and the conv templates each have one ``plan_ops`` (what the kernel
computes, or why not). Fusion asks it of the members it would pack (``accepts``, through
``plan_members``); code generation asks it of the packed group (``plan``). The attention
template's ``accepts`` asks its ``plan`` of a detached copy of the group
(``common.plan_accepts``). Two properties, on graphs drawn around one matmul, conv or
attention:

* for every convex set of members around the anchor, ``accepts`` refuses exactly when
  ``plan`` of the group ``outline.pack`` makes of them refuses (a refusal of policy
  aside: a LayerNorm prologue the GEMM could serve but more slowly, which only fusion
  weighs);
* compiled for cuda (``fusec-cuda``, code generated without a GPU), no group fusion
  formed of more than one op runs on the PyTorch fallback (``KernelSource.remark``):
  the pool, reduce and attention kernels' ``accepts`` ask their plan of a detached copy
  of the group (``common.plan_accepts``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.ir import Operation

import fusec
from fusec.dialect import ops as ai
from fusec.passes.fusion.outline import Group, pack
from tests.profiles import examples

pytestmark = pytest.mark.requires_target("cuda")

FLOATS = ("f16", "bf16", "f32")


def _type(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{'x'.join([*map(str, shape), dtype])}>" if shape else f"tensor<{dtype}>"


@dataclass
class Graph:
    """A function under construction: its arguments, body lines and value types."""

    args: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    types: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)

    def arg(self, shape: tuple[int, ...], dtype: str) -> str:
        name = f"%a{len(self.args)}"
        self.args.append(f"{name}: {_type(shape, dtype)}")
        self.types[name] = (shape, dtype)
        return name

    def op(self, text: str, operands: list[str], shape: tuple[int, ...], dtype: str, attrs=""):
        name = f"%v{len(self.lines)}"
        types = " * ".join(_type(*self.types[v]) for v in operands)
        attrs = f" {{{attrs}}}" if attrs else ""
        self.lines.append(f"  {name} = {text} {', '.join(operands)}{attrs} : {types}")
        self.types[name] = (shape, dtype)
        return name

    def const(self, text: str, shape: tuple[int, ...], dtype: str) -> str:
        """An ``arith.constant`` of ``text`` (a dense literal's contents)."""
        name = f"%c{len(self.lines)}"
        self.lines.append(f"  {name} = arith.constant dense<{text}> : {_type(shape, dtype)}")
        self.types[name] = (shape, dtype)
        return name

    def ai_ops(self) -> int:
        """How many ai ops the body has so far (the next one's index among them)."""
        return sum(" = ai." in line for line in self.lines)

    def cast(self, value: str, dtype: str) -> str:
        shape, old = self.types[value]
        name = f"%v{len(self.lines)}"
        self.lines.append(
            f"  {name} = ai.cast {value} : {_type(shape, old)} to {_type(shape, dtype)}"
        )
        self.types[name] = (shape, dtype)
        return name

    def text(self, results: list[str]) -> str:
        out = ", ".join(_type(*self.types[r]) for r in results)
        return (
            f"func.func @f({', '.join(self.args)}) -> ({out}) {{\n"
            + "\n".join(self.lines)
            + f"\n  return {', '.join(results)} : {out}\n}}\n"
        )


@st.composite
def tails(draw, g: Graph, value: str) -> list[str]:
    """An epilogue after ``value``: elementwise ops, a softmax, a broadcast beyond its
    shape, integer values; the values it made, in order."""
    made = []
    for _ in range(draw(st.integers(0, 3))):
        shape, dtype = g.types[value]
        kind = draw(
            st.sampled_from(["relu", "residual", "row", "softmax", "wider", "mask", "cast"])
        )
        if kind == "relu":
            value = g.op("ai.relu", [value], shape, dtype)
        elif kind == "residual":
            value = g.op("ai.add", [value, g.arg(shape, dtype)], shape, dtype)
        elif kind == "row":  # a vector along the last axis (a bias)
            value = g.op("ai.add", [value, g.arg(shape[-1:], dtype)], shape, dtype)
        elif kind == "softmax":
            axis = draw(st.sampled_from([-1, 0]))
            value = g.op("ai.softmax", [value], shape, dtype, f"axis = {axis} : i64")
        elif kind == "wider":  # broadcast beyond the anchor's shape
            wide = (2, *shape)
            value = g.op("ai.mul", [value, g.arg(wide, dtype)], wide, dtype)
        elif kind == "mask":  # an i1 value inside the epilogue
            mask = g.op("ai.greater", [value, g.arg((), dtype)], shape, "i1")
            value = g.op("ai.where", [mask, value, g.arg(shape, dtype)], shape, dtype)
        else:
            value = g.cast(value, draw(st.sampled_from(FLOATS)))
        made.append(value)
    return made


@st.composite
def matmul_graphs(draw) -> tuple[str, int]:
    """(the graph's text, the index of its matmul among the body's lines)."""
    g = Graph()
    dtype = draw(st.sampled_from(FLOATS + ("f16", "bf16")))
    m, k, n = (draw(st.sampled_from([1, 8, 16, 24])) for _ in range(3))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    batch_a = draw(st.sampled_from([(), (1,), (3,), (2, 3)]))
    batch_b = draw(st.sampled_from([(), (1,), (3,), (2, 3)]))
    lhs = g.arg((*batch_a, *((k, m) if ta else (m, k))), dtype)
    rhs = g.arg((*batch_b, *((n, k) if tb else (k, n))), dtype)
    if draw(st.booleans()):  # a LayerNorm (or a relu) before the matmul, on either side
        side = draw(st.sampled_from(["lhs", "rhs"]))
        shape, _ = g.types[lhs if side == "lhs" else rhs]
        if draw(st.booleans()):
            gamma = g.arg(shape[-1:], dtype)
            if draw(st.booleans()):  # computed, not a group input
                gamma = g.op("ai.relu", [gamma], shape[-1:], dtype)
            made = g.op(
                "ai.layernorm",
                [lhs if side == "lhs" else rhs, gamma, g.arg(shape[-1:], dtype)],
                shape,
                dtype,
            )
        else:
            made = g.op("ai.relu", [lhs if side == "lhs" else rhs], shape, dtype)
        lhs, rhs = (made, rhs) if side == "lhs" else (lhs, made)
    batch = max(batch_a, batch_b, key=len) if batch_a != batch_b else batch_a
    if len(batch_a) == len(batch_b) and batch_a != batch_b:
        batch = tuple(max(x, y) for x, y in zip(batch_a, batch_b, strict=True))
    padded = [(1,) * (len(batch) - len(b)) + b for b in (batch_a, batch_b)]
    if any(p != batch and p != (1,) * len(batch) for p in padded):
        batch = tuple(max(x, y) for x, y in zip(*padded, strict=True))
    attrs = f"transpose_a = {str(ta).lower()}, transpose_b = {str(tb).lower()}"
    anchor = len(g.lines)
    out = g.op("ai.matmul", [lhs, rhs], (*batch, m, n), dtype, attrs)
    made = draw(tails(g, out))
    results = [made[-1] if made else out]
    if made and draw(st.booleans()):  # an intermediate value used outside
        results.append(draw(st.sampled_from([out, *made[:-1]])))
    return g.text(results), anchor


@st.composite
def conv_graphs(draw) -> tuple[str, int]:
    g = Graph()
    dtype = draw(st.sampled_from(FLOATS + ("f16", "bf16")))
    groups = draw(st.sampled_from([1, 1, 2, 8]))
    c = groups * draw(st.sampled_from([1, 4, 8, 16]))
    kout = groups * draw(st.sampled_from([1, 8]))
    r = draw(st.sampled_from([1, 3]))
    h = draw(st.sampled_from([r, 8]))
    x = g.arg((1, c, h, h), dtype)
    if draw(st.integers(0, 3)) == 0:  # a prologue
        x = g.op("ai.relu", [x], (1, c, h, h), dtype)
    w = g.arg((kout, c // groups, r, r), dtype)
    p = h - r + 1
    anchor = len(g.lines)
    out = g.op("ai.conv2d", [x, w], (1, kout, p, p), dtype, f"groups = {groups} : i64")
    made = []
    if draw(st.booleans()):
        made.append(
            g.op(
                "ai.bias_add",
                [out, g.arg((kout,), dtype)],
                (1, kout, p, p),
                dtype,
                "axis = 1 : i64",
            )
        )
    made += draw(tails(g, made[-1] if made else out))
    results = [made[-1] if made else out]
    if made and draw(st.booleans()):
        results.append(draw(st.sampled_from([out, *made[:-1]])))
    return g.text(results), anchor


@st.composite
def pooled_graphs(draw) -> tuple[str, int]:
    """A max pool or a row sum (the Numba pool and reduce kernels) and an epilogue."""
    g = Graph()
    dtype = draw(st.sampled_from(FLOATS))
    x = g.arg((1, 4, 8, 8), dtype)
    if draw(st.booleans()):  # a producer fusion may not take as a prologue
        x = g.op("ai.relu", [x], (1, 4, 8, 8), dtype)
    anchor = len(g.lines)
    if draw(st.booleans()):
        attrs = "kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>"
        out = g.op("ai.max_pool2d", [x], (1, 4, 4, 4), dtype, attrs)
    else:
        out = g.op("ai.reduce_sum", [x], (1, 4, 8), dtype, "axes = array<i64: 3>")
    made = draw(tails(g, out))
    results = [made[-1] if made else out]
    if made and draw(st.booleans()):
        results.append(draw(st.sampled_from([out, *made[:-1]])))
    return g.text(results), anchor


@st.composite
def attention_graphs(draw) -> tuple[str, int]:
    """One ``ai.attention`` (head sizes the flash kernel takes and one it does not; a zero,
    causal or computed mask; an operand made by a relu or a transpose) and an
    epilogue."""
    g = Graph()
    dtype = draw(st.sampled_from(FLOATS + ("f16", "bf16")))
    d = draw(st.sampled_from([32, 64, 128]))
    sq, sk = draw(st.sampled_from([4, 8])), draw(st.sampled_from([4, 8]))
    batch = draw(st.sampled_from([(2,), (1, 3)]))
    q, k, v = (g.arg((*batch, s, d), dtype) for s in (sq, sk, sk))
    prologue = draw(st.sampled_from(["none", "relu", "transpose"]))
    if prologue == "relu":
        q = g.op("ai.relu", [q], (*batch, sq, d), dtype)
    elif prologue == "transpose":  # a head split's layout op before the key
        x = g.arg((*batch[:-1], sk, batch[-1], d), dtype)
        perm = ", ".join(map(str, (*range(len(batch) - 1), len(batch), len(batch) - 1)))
        perm += f", {len(batch) + 1}"
        k = g.op("ai.transpose", [x], (*batch, sk, d), dtype, f"perm = array<i64: {perm}>")
    kind = draw(st.sampled_from(["zero", "causal", "computed"]))
    if kind == "zero":
        mask = g.const("0.0", (), dtype)
    elif kind == "causal":
        rows = [[0.0 if j <= i else -1.0e4 for j in range(sk)] for i in range(sq)]
        mask = g.const(str(rows), (sq, sk), dtype)
    else:
        mask = g.op("ai.relu", [g.arg((sq, sk), dtype)], (sq, sk), dtype)
    anchor = g.ai_ops()
    out = g.op("ai.attention", [q, k, v, mask], (*batch, sq, d), dtype, "scale = 0.125 : f32")
    made = draw(tails(g, out))
    results = [made[-1] if made else out]
    if made and draw(st.booleans()):
        results.append(draw(st.sampled_from([out, *made[:-1]])))
    return g.text(results), anchor


def _parse(text: str):
    try:
        return fusec.parse(text)
    except fusec.FusecError:
        return None  # a drawn shape the ops refuse (a softmax axis of an empty tensor...)


def _convex(members: list[Operation], block_ops: list[Operation]) -> bool:
    """No path leaves the members and comes back (fusion forms no other group)."""
    memberset = set(members)
    outside: set[Operation] = set()  # ops reached from a member through a non-member
    for op in block_ops:
        feeds = [v.owner for v in op.operands if isinstance(v.owner, Operation)]
        if op in memberset:
            if any(f in outside for f in feeds):
                return False
        elif any(f in memberset or f in outside for f in feeds):
            outside.add(op)
    return True


def _candidates(draw, ops: list[Operation], anchor: Operation) -> list[Operation]:
    """A member set around ``anchor``: a random connected extension, in block order."""
    members = {anchor}
    for _ in range(draw(st.integers(0, 4))):
        near = [
            op
            for op in ops
            if op not in members
            and isinstance(op, ai.AiOp)
            and (
                any(v.owner in members for v in op.operands)
                or any(u.operation in members for r in op.results for u in r.uses)
            )
        ]
        if not near:
            break
        members.add(draw(st.sampled_from(near)))
    return [op for op in ops if op in members]


POLICY = "leaves a LayerNorm over"  # a refusal only fusion weighs (layernorm_prologue_problem)


def _agree(draw, graph: tuple[str, int], kind: str) -> None:
    from fusec.targets.cuda.attention import template as attention
    from fusec.targets.cuda.conv import template as conv
    from fusec.targets.cuda.gemm import template as gemm

    text, index = graph
    module = _parse(text)
    if module is None:
        return
    func = next(op for op in module.walk() if op.name == "func.func")
    block = func.regions[0].block
    ops = [op for op in block.ops if isinstance(op, ai.AiOp)]
    anchor = ops[index]
    members = _candidates(draw, list(block.ops), anchor)
    if not _convex(members, list(block.ops)):
        return
    template = {"matmul": gemm, "conv": conv, "attention": attention}[kind]
    refused = template.accepts(members, anchor)
    (fused,) = pack(block, [Group(kind, members, anchor=anchor)])
    planned = template.plan(fused)
    if kind == "conv" and not isinstance(planned, str):
        route = conv.route(planned)
        planned = planned if route in ("implicit", "direct") else route
    served = not isinstance(planned, str)
    if len(members) == 1:
        assert refused is None  # the anchor alone is always a group
        return
    if refused is not None and POLICY in refused:
        assert served, (refused, planned)
        return
    assert (refused is None) == served, (text, [op.name for op in members], refused, planned)


@settings(max_examples=examples(120))
@given(st.data())
def test_gemm_accepts_exactly_what_its_plan_serves(data) -> None:
    _agree(data.draw, data.draw(matmul_graphs()), "matmul")


@settings(max_examples=examples(100))
@given(st.data())
def test_conv_accepts_exactly_what_its_plan_serves(data) -> None:
    _agree(data.draw, data.draw(conv_graphs()), "conv")


@settings(max_examples=examples(60))
@given(st.data())
def test_attention_accepts_exactly_what_its_plan_serves(data) -> None:
    _agree(data.draw, data.draw(attention_graphs()), "attention")


def _fused_fallbacks(text: str) -> list[str]:
    """The matmul, conv, attention, pool and reduce kernels of more than one op that run
    on the fallback."""
    module = _parse(text)
    if module is None:
        return []
    compiled = fusec.compile(module, target="cuda", executable=False)
    return [
        f"{k.name} ({k.kind}): {k.remark.reason}"
        for k in compiled.kernels
        if k.remark is not None
        and k.kind in ("matmul", "conv", "attention", "pool", "reduce")
        and _ops(k) > 1
    ]


def _ops(kernel: fusec.Kernel) -> int:
    """How many ops the group of ``kernel`` holds (its header's first line says)."""
    found = re.search(r"group of (\d+) op\(s\)", kernel.source.split("\n", 1)[0])
    assert found, kernel.source[:200]
    return int(found.group(1))


@settings(max_examples=examples(30))
@given(st.one_of(matmul_graphs(), conv_graphs(), attention_graphs()))
def test_no_group_fusion_formed_falls_back(graph) -> None:
    fallbacks = _fused_fallbacks(graph[0])
    assert not fallbacks, (graph[0], fallbacks)


@settings(max_examples=examples(30))
@given(pooled_graphs())
def test_no_pool_or_reduce_group_fusion_formed_falls_back(graph) -> None:
    fallbacks = _fused_fallbacks(graph[0])
    assert not fallbacks, (graph[0], fallbacks)
