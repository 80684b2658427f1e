"""The cuda experts kernel without a GPU (issue 31): its plan, the module it generates, the
grouped GEMM's C++ and the linked kernels' PTX for sm_90a. Numerics run on the GPU
(``test_experts_gpu.py``): the simulator cannot run linked C++."""

from __future__ import annotations

import re

import pytest
from experts_cases import moe_text
from test_gemm_build import needs_toolchain, needs_toolchain_in_the_default_lane

from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai
from fusec.targets.cuda.experts import template
from fusec.targets.cuda.experts.cpp import MoeKernelSpec
from fusec.targets.cuda.experts.launcher import MoeShape
from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import TileConfig


def _group(text: str) -> ai.FusedOp:
    module = parse(text)
    run_pipeline(module, "fusec-cuda")
    (group,) = [op for op in module.walk() if getattr(op, "kind_name", None) == "experts"]
    return group


def _op(text: str) -> ai.MoEExpertsOp:
    (op,) = [op for op in parse(text).walk() if isinstance(op, ai.MoEExpertsOp)]
    return op


def test_the_plan_takes_16_bit_layers_and_picks_the_row_tile():
    decode = template.plan(_op(moe_text(8, 128, 256, 8, 2, "bf16")))
    assert isinstance(decode, template.MoePlan)
    assert decode.shape.bm == 64 and decode.tile.bm == 64  # 2 rows an expert on average
    prefill = template.plan(_op(moe_text(4096, 128, 256, 8, 2, "f16", "i32")))
    assert isinstance(prefill, template.MoePlan)
    assert prefill.shape.bm == 128 and prefill.index_bytes == 4
    assert prefill.tile.text == "128x256x64 s4 c2 g8 epi=smem math=fast"


@pytest.mark.parametrize(
    "text, reason",
    [
        (moe_text(8, 128, 256, 8, 2, "f32"), "IEEE"),
        (moe_text(8, 100, 256, 8, 2, "bf16"), "multiples of 8"),
        (moe_text(8, 128, 60, 8, 2, "bf16"), "multiples of 8"),
    ],
)
def test_the_plan_says_why_pytorch_runs_a_layer(text, reason):
    p = template.plan(_op(text))
    assert isinstance(p, str) and reason in p
    source = template.generate(_group(text), "k0").source
    assert "FALLBACK" in source and reason in source


def test_rows_max_bounds_every_routing():
    """Each expert's group padded to a whole tile: at most P + E (BM - 1) rows."""
    shape = MoeShape(tokens=5, width=64, hidden=64, experts=4, k=2, bm=64)
    assert shape.rows_max == 4 * 64  # 10 pairs: at worst 4 groups of one partial tile
    assert MoeShape(3, 64, 64, 8, 1, 64).rows_max == 3 * 64  # 3 pairs: 3 groups at most
    assert shape.scratch_bytes()["groups"] == 4 * (1 + 4)
    worst = sum(-(-c // 64) * 64 for c in (7, 1, 1, 1))  # one routing of the 10 pairs
    assert worst <= shape.rows_max


def test_the_module_launches_five_linked_kernels_through_the_abi():
    kernel = template.generate(_group(moe_text(64, 128, 256, 4, 2, "bf16")), "k0")
    assert kernel.kind == "experts"
    stages = [getattr(s, "stage", "gemm") for s in kernel.specs]
    assert stages == ["route", "gather", "gemm", "gemm", "combine"]
    up, down = kernel.specs[2], kernel.specs[3]
    assert up.grouped and up.swiglu and up.config.epilogue == "direct"
    assert down.grouped and not down.swiglu and down.out_dtype == "f32"
    assert "fs_ld_f32(e0, row)" in down.cpp_source()  # the routing weight, by row
    imports = re.findall(r"^from (\S+) import|^import (\S+)", kernel.source, re.MULTILINE)
    assert {a or b for a, b in imports} == {"fusec.targets.cuda.abi"}
    assert "LINKED = MOE" in kernel.source


def test_the_swiglu_kernel_is_the_a_b_switch(monkeypatch):
    monkeypatch.setenv(template.SWIGLU_ENV, "kernel")
    kernel = template.generate(_group(moe_text(1000, 128, 256, 4, 2, "bf16")), "k0")
    stages = [getattr(s, "stage", "gemm") for s in kernel.specs]
    assert stages == ["route", "gather", "gemm", "swiglu", "gemm", "combine"]
    assert not kernel.specs[2].swiglu and kernel.specs[2].config.epilogue == "smem"
    monkeypatch.setenv(template.SWIGLU_ENV, "fused")
    with pytest.raises(ValueError, match="expected 'epilogue' or 'kernel'"):
        template.generate(_group(moe_text(8, 128, 256, 4, 2, "bf16")), "k0")


def test_the_gated_gemm_loads_two_halves_of_b_and_stores_half_the_columns():
    spec = cpp.GemmSpec(TileConfig(64, 128, 64, 8, 1, 8), "bf16", batch_b=True, swiglu=True)
    source = spec.cpp_source()
    assert "SWIGLU = 1," in source and "gemm_load_gated<C>" in source
    assert "gated: silu(gate) * up" in source
    with pytest.raises(ValueError, match="the direct epilogue"):
        cpp.GemmSpec(
            TileConfig(64, 128, 64, 8, 1, 8, epilogue="smem"), "bf16", batch_b=True, swiglu=True
        )
    with pytest.raises(ValueError, match="B K-major"):
        cpp.GemmSpec(TileConfig(64, 128, 64, 8, 1, 8), "bf16", b_major="n", swiglu=True)


def test_a_grouped_gemm_reads_its_tiles_and_experts_from_the_table():
    spec = cpp.GemmSpec(TileConfig(64, 128, 64, 8, 1, 8), "bf16", batch_b=True, grouped=True)
    source = spec.cpp_source()
    assert "GROUPED = 1," in source and "u64 groups, int M" in source  # the wrapper's
    assert cpp.kernel_arg_count(spec) == (4, 4)  # map_a, map_b, out, groups
    plain = cpp.GemmSpec(TileConfig(64, 128, 64, 8, 1, 8), "bf16", batch_b=True)
    assert "GROUPED = 0," in plain.cpp_source() and "groups, int M" not in plain.cpp_source()


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"batch_b": False}, "B batched"),
        ({"config": TileConfig(64, 128, 64, 8, 1, 8, split_k=2)}, "K unsplit"),
        ({"config": TileConfig(128, 128, 64, 6, 2, 8, "pingpong")}, "cooperative"),
    ],
)
def test_a_grouped_gemm_refuses_what_its_walk_cannot_do(change, problem):
    fields = {"config": TileConfig(64, 128, 64, 8, 1, 8), "dtype": "bf16", "batch_b": True}
    with pytest.raises(ValueError, match=problem):
        cpp.GemmSpec(**(fields | change), grouped=True)


@needs_toolchain_in_the_default_lane
def test_the_light_kernels_build_for_sm90a():
    from fusec.targets.cuda.build import linked_ptx

    for stage in ("route", "gather", "swiglu", "combine"):
        ptx = linked_ptx(MoeKernelSpec(stage, "bf16", "f32", 4, 8, 128))
        assert ".local" not in ptx, stage  # nothing spilled
    route = linked_ptx(MoeKernelSpec("route", "f16", "f16", 8, 64, 64))
    assert "atom.shared.add" in route  # the counts and fills in shared memory


@needs_toolchain
def test_the_grouped_gemms_build_with_wgmma():
    from fusec.targets.cuda.build import linked_ptx

    kernel = template.generate(_group(moe_text(1000, 128, 256, 8, 2, "f16")), "k0")
    for spec in (kernel.specs[2], kernel.specs[3]):
        ptx = linked_ptx(spec)
        assert "wgmma.mma_async" in ptx and ".local" not in ptx


def test_rows_max_bounds_every_routing_drawn():
    """Any split of the P pairs among the experts fits the sorted rows' scratch: the groups
    padded to whole tiles sum to at most ``rows_max`` (what the route kernel may write)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None)
    @given(
        st.integers(1, 300),
        st.integers(1, 4),
        st.integers(1, 16),
        st.sampled_from([64, 128]),
        st.randoms(use_true_random=False),
    )
    def check(tokens, k, experts, bm, rnd):
        counts = [0] * experts
        for _ in range(tokens * k):
            counts[rnd.randrange(experts)] += 1
        shape = MoeShape(tokens, 64, 64, experts, k, bm)
        assert sum(-(-c // bm) * bm for c in counts) <= shape.rows_max

    check()
