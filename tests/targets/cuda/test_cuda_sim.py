"""CUDA templates under Numba's CUDA simulator, tiny shapes, vs the reference executor.

The simulator must be switched on before numba.cuda is imported, so the cases
run in one subprocess (``sim_runner.py``) and each test checks its line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_client import run_simulator

from fusec.targets.cuda.env import simulator_enabled

HERE = Path(__file__).parent

pytestmark = pytest.mark.requires_target("cuda")  # the simulator is numba-cuda's

CASES = [
    ("pw_bcast_f16", "pointwise_broadcast", [3, 24, "f16"], "f16"),
    ("cast_rt_f16_exact", "cast_roundtrip", [3, 40, "f16"], "f32"),
    ("cast_rt_bf16_exact", "cast_roundtrip", [2, 24, "bf16"], "f32"),
    ("pw_bcast_bf16", "pointwise_broadcast", [2, 16, "bf16"], "bf16"),
    ("pw_bcast_f32", "pointwise_broadcast", [2, 12, "f32"], "f32"),
    ("pw_tail_f16", "pointwise_tail", [37, "f16"], "f16"),
    ("pw_tail_f32", "pointwise_tail", [13, "f32"], "f32"),
    ("pw_bias_f16", "pointwise_bias", [2, 3, 2, 4, "f16"], "f16"),
    ("pw_unary_f32", "pointwise_every_unary", [21, "f32"], "f32"),
    ("pw_unary_bf16", "pointwise_every_unary", [16, "bf16"], "bf16"),
    ("pw_domain_f32", "pointwise_domain_math", [19, "f32"], "f32"),
    ("pw_select_f32", "pointwise_select", [3, 10, "f32"], "f32"),
    ("pw_select_f16", "pointwise_select", [2, 24, "f16"], "f16"),
    ("pw_rope_f16", "pointwise_rope", [[2, 4, 8, 16], "f16"], "f16"),
    ("pw_rope_bf16", "pointwise_rope", [[1, 2, 4, 64], "bf16"], "bf16"),
    ("pw_rope_f32", "pointwise_rope", [[3, 5, 6], "f32"], "f32"),  # n/2 = 3: VEC 1
    ("ln_warp_f16", "layernorm_residual", [5, 64, "f16"], "f16"),
    ("ln_block_f32", "layernorm_residual", [2, 1024, "f32"], "f32"),
    ("ln_odd_bf16", "layernorm_residual", [3, 40, "bf16"], "bf16"),
    ("ln_tiny_variance_f32", "layernorm_residual", [3, 64, "f32"], "f32", 1e-3),
    ("sm_last_f16", "softmax_last", [3, 48, "f16"], "f16"),
    ("sm_last_block_f32", "softmax_last", [2, 600, "f32"], "f32"),
    ("sm_axis_f32", "softmax_axis", [[2, 5, 3], 1, "f32"], "f32"),
    ("sm_axis0_bf16", "softmax_axis", [[4, 6], 0, "bf16"], "bf16"),
]


#: The conv template's gemv route (``conv.gemv``): a 1x1 conv on a 1x1 plane of a few
#: images, as ``conv-layout`` relays it (NHWC input, KRSC weights, NHWC or NCHW result),
#: and whole squeeze-excite blocks through the cuda pipeline (mean, gemv conv + silu, gemv
#: conv + sigmoid, the scale): (name, builder, args, dtype, convs on the gemv kernel).
GEMV_CASES = [
    ("gemv_nhwc_f16", "conv_gemv_nhwc", [1, 48, 7, "f16"], "f16", 1),
    ("gemv_nhwc_rows_bf16", "conv_gemv_nhwc", [3, 37, 5, "bf16"], "bf16", 1),
    ("gemv_nchw_out_f16", "conv_gemv_nhwc", [2, 300, 9, "f16", "nchw"], "f16", 1),
    ("gemv_wide_f16", "conv_gemv_nhwc", [1, 1152, 3, "f16"], "f16", 1),
    ("se_block_f16", "squeeze_excite", [1, 40, 6, 5, "f16"], "f16", 2),
    ("se_block_rows_bf16", "squeeze_excite", [4, 24, 8, 3, "bf16"], "bf16", 2),
]


#: RoPE on a column slice (a combined QKV projection's q or k, issue 28) through the
#: ``fusec-cuda`` pipeline: one pointwise kernel reading the slice in place
#: (``read-views-in-place``): (name, args of ``sliced_rope``, dtype).
VIEW_CASES = [
    ("rope_slice_q_f16", "sliced_rope", [16, 4, 64, 512, 0, "f16"], "f16"),
    ("rope_slice_k_bf16", "sliced_rope", [5, 2, 32, 320, 128, "bf16"], "bf16"),
    ("rope_slice_f32", "sliced_rope", [3, 2, 8, 40, 8, "f32"], "f32"),  # rows of 40: VEC 8
    # every second row backwards from row 5 (a negative stride), columns 4 on
    ("rows_back_f16", "slice_square", [[6, 20], [5, 4], [3, 16], [-2, 1], "f16"], "f16"),
    ("one_element_f32", "slice_square", [[4, 8], [2, 3], [1, 1], [1, 1], "f32"], "f32"),
    # random slice/reshape chains (``random_view_graph``) whose chain the pass moves in
    *(
        (f"views_{seed}", "random_view_graph", [seed], None)
        for seed in (0, 3, 6, 9, 10, 12, 18, 20)
    ),
    # GPT-NeoX's interleaved QKV: the head split, heads before the sequence (a transpose
    # keeping the last dim) and k's slice read in place; random chains whose transpose
    # moves in
    ("interleaved_rope_f16", "interleaved_rope", [7, 3, 32, 1, "f16"], "f16"),
    ("interleaved_rope_bf16", "interleaved_rope", [5, 2, 64, 2, "bf16"], "bf16"),
    *((f"views_t{seed}", "random_view_graph", [seed, True], None) for seed in (29, 43)),
]


@pytest.fixture(scope="module")
def sim_results() -> dict:
    records = [{"name": c[0], "builder": c[1], "args": c[2], **_scale(c)} for c in CASES]
    records += [
        {"name": c[0], "builder": c[1], "args": c[2], "pipeline": "fusec-cuda", "seed": k}
        for k, c in enumerate(GEMV_CASES)
    ]
    records += [
        {"name": c[0], "builder": c[1], "args": c[2], "seed": k, "pipeline": "fusec-cuda"}
        for k, c in enumerate(VIEW_CASES)
    ]  # fmt: skip
    return run_simulator(HERE / "sim_runner.py", records)


def _scale(case: tuple) -> dict:
    """Inputs scaled by the case's fifth field, when it has one."""
    return {"scale": case[4]} if len(case) > 4 else {}


@pytest.mark.parametrize(("name", "dtype"), [(c[0], c[3]) for c in CASES])
def test_template_under_simulator(sim_results: dict, name: str, dtype: str) -> None:
    record = sim_results.get(name)
    assert record is not None, f"{name}: no result from the simulator run"
    assert "error" not in record, record.get("error")
    assert record["passed"], "no outputs compared"
    for k, (ok, detail) in enumerate(zip(record["passed"], record["details"], strict=True)):
        assert ok, f"{name} ({dtype}) output #{k}: {detail}"


@pytest.mark.parametrize(("name", "dtype", "convs"), [(c[0], c[3], c[4]) for c in GEMV_CASES])
def test_gemv_conv_under_simulator(sim_results: dict, name: str, dtype: str, convs: int) -> None:
    """Poisoned outputs against the reference (``sim_runner``), every conv on the gemv
    kernel (its header), no PyTorch fallback."""
    test_template_under_simulator(sim_results, name, dtype)
    targets = sim_results[name]["targets"]
    assert sum("conv as dot products on CUDA cores" in t for t in targets) == convs, targets
    assert not any("FALLBACK" in t for t in targets), targets


@pytest.mark.parametrize(("name", "dtype"), [(c[0], c[3]) for c in VIEW_CASES])
def test_slices_read_in_place_under_simulator(sim_results: dict, name: str, dtype: str) -> None:
    """Poisoned outputs against the reference, and the slice (its reshape) and the
    elementwise ops one pointwise kernel: no copy kernel."""
    test_template_under_simulator(sim_results, name, dtype)
    assert sim_results[name]["kinds"] == ["pointwise"], sim_results[name]["kinds"]


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX")
def test_gemv_conv_ptx_for_sm_90() -> None:
    """The gemv conv kernel compiles for the H200 in float32 registers: no local memory,
    no float64 arithmetic, one entry."""
    import re

    import cuda_cases

    import fusec

    text = cuda_cases.conv_gemv_nhwc(1, 1152, 48, "f16")
    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes", executable=False)
    ((kernel, ptx),) = compiled.assembly("sm_90")
    assert "conv as dot products on CUDA cores" in kernel.source
    assert ".target sm_90" in ptx and ptx.count(".entry") == 1
    assert ".local" not in ptx
    assert not [line for line in ptx.splitlines() if re.search(r"^\s*(add|mul|fma)\.\w*f64", line)]
