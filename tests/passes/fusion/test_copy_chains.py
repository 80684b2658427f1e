"""The injective stage: a chain of index maps is one copy kernel.

Planning needs no GPU (the cuda target judges the groups from facts); the numbers
are checked on the reference and cpu targets against the unfused reference, on
fresh random inputs, outputs poisoned (views move elements: bit for bit).
"""

from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai


def _t(shape: tuple[int, ...], dtype: str = "f32") -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def _groups(text: str, target: str) -> list[tuple[str, list[str]]]:
    module = parse(text)
    run_pipeline(module, target=target)
    return [
        (op.kind_name, [inner.name for inner in op.block.ops if isinstance(inner, ai.AiOp)])
        for op in module.walk()
        if isinstance(op, ai.FusedOp)
    ]


# GPT-2's attention input: Q, K, V sliced from one projection, each split into heads
QKV_SPLIT = f"""func.func @f(%x: {_t((2, 16, 192))})
    -> ({_t((2, 4, 16, 16))}, {_t((2, 4, 16, 16))}, {_t((2, 4, 16, 16))}) {{
  %e = ai.exp %x : {_t((2, 16, 192))}
  %q = ai.slice %e {{offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 16, 64>,
                     strides = array<i64: 1, 1, 1>}} : {_t((2, 16, 192))}
  %k = ai.slice %e {{offsets = array<i64: 0, 0, 64>, sizes = array<i64: 2, 16, 64>,
                     strides = array<i64: 1, 1, 1>}} : {_t((2, 16, 192))}
  %v = ai.slice %e {{offsets = array<i64: 0, 0, 128>, sizes = array<i64: 2, 16, 64>,
                     strides = array<i64: 1, 1, 1>}} : {_t((2, 16, 192))}
  %q4 = ai.reshape %q {{shape = array<i64: 2, 16, 4, 16>}} : {_t((2, 16, 64))}
  %k4 = ai.reshape %k {{shape = array<i64: 2, 16, 4, 16>}} : {_t((2, 16, 64))}
  %v4 = ai.reshape %v {{shape = array<i64: 2, 16, 4, 16>}} : {_t((2, 16, 64))}
  %qh = ai.transpose %q4 {{perm = array<i64: 0, 2, 1, 3>}} : {_t((2, 16, 4, 16))}
  %kh = ai.transpose %k4 {{perm = array<i64: 0, 2, 1, 3>}} : {_t((2, 16, 4, 16))}
  %vh = ai.transpose %v4 {{perm = array<i64: 0, 2, 1, 3>}} : {_t((2, 16, 4, 16))}
  return %qh, %kh, %vh : {_t((2, 4, 16, 16))}, {_t((2, 4, 16, 16))}, {_t((2, 4, 16, 16))}
}}
"""

# a transposed value read by two chains and returned itself: cloned into each chain
SHARED = f"""func.func @f(%x: {_t((4, 6, 8))})
    -> ({_t((6, 4, 8))}, {_t((6, 32))}, {_t((8, 6, 2))}) {{
  %e = ai.exp %x : {_t((4, 6, 8))}
  %t = ai.transpose %e {{perm = array<i64: 1, 0, 2>}} : {_t((4, 6, 8))}
  %r = ai.reshape %t {{shape = array<i64: 6, 32>}} : {_t((6, 4, 8))}
  %s = ai.slice %t {{offsets = array<i64: 0, 1, 0>, sizes = array<i64: 6, 2, 8>,
                     strides = array<i64: 1, 2, 1>}} : {_t((6, 4, 8))}
  %u = ai.transpose %s {{perm = array<i64: 2, 0, 1>}} : {_t((6, 2, 8))}
  return %t, %r, %u : {_t((6, 4, 8))}, {_t((6, 32))}, {_t((8, 6, 2))}
}}
"""

# ViT's class token before the patch rows: a concat of a row and a strided view
CLASS_TOKEN = f"""func.func @f(%c: {_t((2, 1, 8))}, %p: {_t((2, 8, 4))}) -> {_t((2, 5, 8))} {{
  %e = ai.exp %p : {_t((2, 8, 4))}
  %t = ai.transpose %e {{perm = array<i64: 0, 2, 1>}} : {_t((2, 8, 4))}
  %y = ai.concat %c, %t {{axis = 1 : i64}} : {_t((2, 1, 8))} * {_t((2, 4, 8))}
  return %y : {_t((2, 5, 8))}
}}
"""

# a lookup at run-time ids stays alone on cuda (PyTorch runs it), takes its views on cpu
TAKE = f"""func.func @f(%x: {_t((6, 8))}, %i: {_t((5,), "i64")}) -> {_t((5, 6))} {{
  %e = ai.exp %x : {_t((6, 8))}
  %t = ai.transpose %e {{perm = array<i64: 1, 0>}} : {_t((6, 8))}
  %y = ai.take %t, %i {{axis = 0 : i64}} : {_t((8, 6))} * {_t((5,), "i64")}
  return %y : {_t((5, 6))}
}}
"""

CHAIN = ["ai.slice", "ai.reshape", "ai.transpose"]


def test_a_head_split_of_a_qkv_slice_is_one_copy_per_head_tensor() -> None:
    copies = [sorted(ops) for kind, ops in _groups(QKV_SPLIT, "cuda") if kind == "copy"]
    assert copies == [sorted(CHAIN)] * 3
    assert not [kind for kind, _ in _groups(QKV_SPLIT, "cuda") if kind == "view"]


def test_a_value_read_elsewhere_is_cloned_into_each_chain() -> None:
    groups = _groups(SHARED, "cuda")
    copies = sorted(sorted(ops) for kind, ops in groups if kind == "copy")
    assert copies == [
        ["ai.slice", "ai.transpose", "ai.transpose"],  # reads exp's result, not %t
        ["ai.transpose"],  # %t itself, returned
    ]
    # the reshape of %t reads the transpose's buffer: a view, no kernel
    assert ("view", ["ai.reshape"]) in groups


def test_a_concat_takes_the_views_of_its_operands() -> None:
    copies = [ops for kind, ops in _groups(CLASS_TOKEN, "cuda") if kind == "copy"]
    assert [sorted(ops) for ops in copies] == [["ai.concat", "ai.transpose"]]


def test_a_lookup_joins_no_chain_on_cuda_and_does_on_cpu() -> None:
    cuda = sorted(ops for kind, ops in _groups(TAKE, "cuda") if kind == "copy")
    assert cuda == [["ai.take"], ["ai.transpose"]]
    cpu = [sorted(ops) for kind, ops in _groups(TAKE, "cpu") if kind == "copy"]
    assert cpu == [["ai.take", "ai.transpose"]]


def _inputs(text: str, rng: np.random.Generator) -> list[np.ndarray]:
    function = parse(text).body.block.first_op
    out = []
    for t in function.function_type.inputs.data:  # type: ignore[attr-defined]
        shape = tuple(t.get_shape())
        if "i64" in str(t):
            out.append(rng.integers(0, 8, shape).astype(np.int64))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


@pytest.mark.parametrize("target", ["reference", "cpu"])
@pytest.mark.parametrize(
    "text", [QKV_SPLIT, SHARED, CLASS_TOKEN, TAKE], ids=["qkv", "shared", "class-token", "take"]
)
def test_chains_compute_what_the_ops_do(text: str, target: str) -> None:
    args = _inputs(text, np.random.default_rng(5))
    want = fusec.api.reference_outputs(text, args)
    compiled = fusec.compile(text, target=target)
    got = (
        compiled._runner(args, alloc=lambda s, d: np.full(s, np.nan, d))
        if target == "cpu"
        else compiled(*args)
    )
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-6)


@pytest.mark.parametrize(
    "text", [QKV_SPLIT, SHARED, CLASS_TOKEN], ids=["qkv", "shared", "class-token"]
)
def test_fusing_the_fused_chains_again_changes_nothing(text: str) -> None:
    """A chain re-read from the IR keeps its anchor (its sink), so nothing regroups."""
    once = fusec.compile(text, target="cuda", executable=False).ir
    assert fusec.compile(once, target="cuda", pipeline="fuse", executable=False).ir == once
