"""RoPE as the flash attention's prologue (issue 28), without a GPU: ``rope-into-attention``
(in ``fusec-cuda-rope-prologue``; not in ``fusec-cuda``, the default, where it measured no
faster) moves Llama's RoPE group into the attention group; the plan reads q and k where the RoPE
read them and where cos and sin are; the generated offsets and the kernel's numpy model
(rotation after the load, then the online softmax) against the reference; the build for
sm_90a. ``test_attention_rope_gpu.py`` runs the kernel."""

from __future__ import annotations

import re

import attention_model as model
import numpy as np
import pytest
from rope_cases import neox_attention_graph, rope_attention_graph, rope_tables
from test_gemm_build import needs_toolchain

import fusec
from fusec.runtime.reference import entry_function, run_reference
from fusec.targets.cuda.target import CudaTarget
from fusec.tools.runner import random_inputs

pytestmark = pytest.mark.requires_target("cuda")

#: (batch, seq, heads, kv heads, head size[, rotary dims]): Llama's GQA, a long sequence
#: of heads of 128 (three query blocks, a ragged key block), MHA with a ragged sequence;
#: GPT-NeoX's partial rotary (a quarter of the head; half of it with heads of 128)
CASES = {
    "gqa-d64": (2, 40, 4, 2, 64),
    "long-d128": (1, 300, 2, 1, 128),
    "mha-ragged": (3, 17, 2, 2, 64),
    "partial-d64": (2, 40, 4, 4, 64, "f16", 16),
    "partial-d128-gqa": (1, 300, 4, 2, 128, "f16", 64),
}
#: GPT-NeoX's layer (q, k and v slices of one head split, a partial rotary): (batch, seq,
#: heads, head size, rotary dims)
NEOX = {"neox-d64": (2, 40, 4, 64, 16), "neox-d128": (1, 130, 2, 128, 32)}


def _case(name: str) -> tuple[str, int, int, int, int]:
    """(the graph, batch, seq, heads, head size) of case ``name``."""
    if name in NEOX:
        batch, seq, heads, d, _ = NEOX[name]
        return neox_attention_graph(*NEOX[name]), batch, seq, heads, d
    batch, seq, heads, _, d, *_ = CASES[name]
    return rope_attention_graph(*CASES[name]), batch, seq, heads, d


#: the default: RoPE as its own kernel (CudaTarget.pipelines)
ROPE_KERNEL = "fusec-cuda"
#: RoPE as the flash kernel's prologue (not the default: measured no faster)
PROLOGUE = "fusec-cuda-rope-prologue"


def _attention(text: str, pipeline: str | None = PROLOGUE):
    compiled = fusec.compile(text, target="cuda", executable=False, pipeline=pipeline)
    return compiled, [k for k in compiled.kernels if k.kind == "attention"]


def test_the_rope_group_moves_into_the_attention() -> None:
    text = rope_attention_graph(2, 40, 4, 2, 64)
    compiled, (kernel,) = _attention(text)
    assert [k.kind for k in compiled.kernels] == ["attention"]
    assert "RoPE of q and k applied in shared memory after the load" in kernel.source
    (spec,) = kernel.specs
    # q and k read from the projection where the RoPE read them: rows of 512 (the whole
    # q/k/v row), not the rotated buffer's 384
    assert spec.view("q").row_stride == spec.view("k").row_stride == 512
    # cos and sin [seq, d] broadcast over batch and heads: rows of 64, heads stride 0
    cos = ("f16", 0, 64, 1, ((8, 0),))
    assert spec.rope == (("q", cos, cos), ("k", cos, cos))
    source = spec.cpp_source()
    assert "ROPE_Q = 1, ROPE_K = 1" in source
    assert "u64 q_cos, u64 q_sin, u64 k_cos, u64 k_sin)" in source


def test_the_default_keeps_the_rope_kernel() -> None:
    compiled, (kernel,) = _attention(rope_attention_graph(2, 40, 4, 2, 64), ROPE_KERNEL)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "attention"]
    assert not kernel.specs[0].rope


def test_a_rope_the_kernel_cannot_take_stays_a_kernel() -> None:
    """A head size of 32 (the flash kernel takes 64 and 128): the merged group would fall
    back to PyTorch, so the pass leaves the RoPE kernel and the attention as they were."""
    compiled, (kernel,) = _attention(rope_attention_graph(1, 16, 2, 1, 32))
    rope = [k for k in compiled.kernels if "ai.rotate_half" in k.source.split("\n\n")[0]]
    assert [k.kind for k in rope] == ["pointwise"]
    assert kernel.runs_op_by_op and "head sizes 32/32" in kernel.source


@pytest.mark.parametrize("name", [*CASES, *NEOX])
def test_the_kernels_model_with_the_rope_prologue_matches_the_reference(name: str) -> None:
    """The kernel's reads (its tensor maps' views of the projection, cos and sin at the
    generated offsets), its rotation and online softmax (``attention_model``) against the
    reference executor's run of the graph as written."""
    text, batch, seq, heads, d = _case(name)
    compiled, (kernel,) = _attention(text)
    (spec,) = kernel.specs
    rot = spec.rotary or d
    namespace: dict = {}
    exec(compile(kernel.source, kernel.name, "exec"), namespace)
    inputs = namespace["ATTENTION"].inputs
    args = random_inputs(entry_function(compiled.module), seed=3)
    cos, sin = rope_tables(seq, rot)
    args[1], args[2] = cos.astype(np.float16), sin.astype(np.float16)
    operands = {r: model.operand_as_addressed(spec, r, args[inputs[r]]) for r in "qkv"}
    for role in "qk":
        rows = spec.sq if role == "q" else spec.sk
        factors = [
            model.read_as_addressed(
                spec, f"{role}_{w}_offset", args[inputs[f"{role}_{w}"]], rows, rot
            )
            for w in ("cos", "sin")
        ]
        operands[role] = model.rotated_as_kernel(spec, role, operands[role], *factors)
    out, writes = model.run(spec, operands["q"], operands["k"], operands["v"])
    assert (writes == 1).all()
    (want,) = run_reference(compiled.module, args, rounding="groups")
    got = out.reshape(batch, heads, seq, d).transpose(0, 2, 1, 3).reshape(want.shape)
    assert not np.isnan(got).any()
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 2e-3, rel


def test_the_pass_option_limits_a_rope_of_k_to_one_query_block() -> None:
    """``rope-into-attention{max_query_blocks=1}`` moves a RoPE of k in where a (batch,
    head) has one block of 128 queries (each K tile rotated once, as the RoPE kernel
    does); at 300 queries (three blocks: each K tile rotated three times) the RoPE kernel
    stays. ``fusec-cuda``, the default, keeps RoPE as its own kernel at every length."""
    pipeline = CudaTarget.pipelines[PROLOGUE].replace(
        "rope-into-attention", "rope-into-attention{max_query_blocks=1}"
    )
    short, _ = _attention(rope_attention_graph(2, 128, 4, 2, 64), pipeline)
    assert [k.kind for k in short.kernels] == ["attention"]
    long, (kernel,) = _attention(rope_attention_graph(*CASES["long-d128"]), pipeline)
    assert [k.kind for k in long.kernels] == ["pointwise", "attention"]
    assert not kernel.specs[0].rope
    default, _ = _attention(rope_attention_graph(2, 128, 4, 2, 64), None)
    assert [k.kind for k in default.kernels] == ["pointwise", "attention"]


def test_a_partial_rope_moves_in_with_its_concat() -> None:
    """GPT-NeoX's partial rotary (the first 16 of 64 head dims rotated, concatenated with
    the rest): without the prologue a RoPE kernel and a copy kernel (the concat); with it
    one attention kernel that rotates the first 16 dims, reading cos and sin ``[seq, 16]``
    at rows of 16."""
    text = rope_attention_graph(*CASES["partial-d64"])
    separate, _ = _attention(text, ROPE_KERNEL)
    assert [k.kind for k in separate.kernels] == ["pointwise", "copy", "attention"]
    compiled, (kernel,) = _attention(text)
    assert [k.kind for k in compiled.kernels] == ["attention"]
    assert "RoPE of q and k (the first 16 of 64 head dims)" in kernel.source
    (spec,) = kernel.specs
    assert spec.rotary == 16 and "ROT = 16" in spec.cpp_source()
    cos = ("f16", 0, 16, 1, ((8, 0),))
    assert spec.rope == (("q", cos, cos), ("k", cos, cos))


def test_neox_layer_is_one_attention_kernel() -> None:
    """GPT-NeoX's q, k and v are slices of one per-head split: the split's copy kernel (v's
    source), q's and k's RoPE kernels and their concat copies all move into the attention,
    which reads q, k and v from the projection in place."""
    text = neox_attention_graph(*NEOX["neox-d64"])
    separate, _ = _attention(text, ROPE_KERNEL)
    assert sorted(k.kind for k in separate.kernels) == [
        "attention",
        *["copy"] * 3,
        "pointwise",
        "pointwise",
    ]
    compiled, (kernel,) = _attention(text)
    assert [k.kind for k in compiled.kernels] == ["attention"]
    (spec,) = kernel.specs
    assert spec.rotary == 16
    # q, k and v rows of the whole projection row (4 heads x 192), heads 192 apart
    assert {spec.view(r).row_stride for r in "qkv"} == {768}


def test_a_partial_rope_of_no_whole_chunk_pairs_stays_a_kernel() -> None:
    """8 rotated dims (the kernel rotates 16-byte chunk pairs: multiples of 16): the RoPE
    and concat kernels stay, the attention as it was."""
    compiled, (kernel,) = _attention(rope_attention_graph(2, 40, 4, 2, 64, "f16", 8))
    assert [k.kind for k in compiled.kernels] == ["pointwise", "copy", "attention"]
    assert not kernel.specs[0].rope and not kernel.runs_op_by_op


def test_the_factors_are_read_as_vectors_only_where_every_run_of_8_is_aligned() -> None:
    """ROPE_VEC (cos and sin 8 at a time, 16-byte loads) where every factor view is
    contiguous along the head dim with offset, row and batch strides whole 16-byte steps;
    element by element otherwise (the kernel also checks the tables' addresses)."""
    import dataclasses

    from fusec.targets.cuda.attention.cpp import _rope_vectors
    from fusec.targets.cuda.attention.views import MaskView

    _, (kernel,) = _attention(rope_attention_graph(*CASES["gqa-d64"]))
    (spec,) = kernel.specs
    assert _rope_vectors(spec) and "ROPE_VEC = 1" in spec.cpp_source()

    def with_factor(**change) -> bool:
        """Whether ``spec`` with ``change`` made to every cos and sin view reads vectors."""

        def changed(view: tuple) -> tuple:
            return dataclasses.replace(MaskView.from_tuple(view), **change).as_tuple()

        rope = tuple((role, changed(cos), changed(sin)) for role, cos, sin in spec.rope)
        return _rope_vectors(dataclasses.replace(spec, rope=rope))

    assert with_factor(offset=16) and with_factor(dtype="f32", offset=4, row_stride=68)
    assert not with_factor(offset=4)  # 8 bytes in
    assert not with_factor(row_stride=68)  # rows 136 bytes apart
    assert not with_factor(col_stride=2)
    assert not with_factor(batch=((8, 12),))
    assert not _rope_vectors(dataclasses.replace(spec, rope=()))


@needs_toolchain
@pytest.mark.parametrize("name", ["gqa-d64", "long-d128", "partial-d128-gqa"])
def test_the_rope_kernel_builds_for_sm_90a(name: str, tmp_path) -> None:
    """With the rotation in shared memory the kernel still builds without spills."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    _, (kernel,) = _attention(rope_attention_graph(*CASES[name]))
    built = build.build(kernel.specs[0], KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
