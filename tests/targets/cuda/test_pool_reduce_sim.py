"""The cuda pool and reduce templates under Numba's CUDA simulator, vs the reference.

Simulator cases compile a pooling or reduction (with an elementwise epilogue, which the
planner fuses into its group) for the cuda target, run it with poisoned outputs under
Numba's CUDA simulator (``pool_reduce_sim.py``, a subprocess) and compare with the
reference executor: max pooling and max reductions bit for bit with NaN and -inf in
their inputs, the rest at the element type's tolerance. A few cases run in the
default lane; the full matrix of attributes and element types in the slow one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_client import run_simulator

HERE = Path(__file__).parent

pytestmark = pytest.mark.requires_target("cuda")

DTYPES = ("f32", "f16", "bf16")

# (name, builder, args, special): special scatters NaN and -inf into the input ("zeros":
# the input is 0.0 and -0.0)
POOL, REDUCE, CL = "pool_program", "reduce_program", "channels_last_group"
QUICK = [
    ("maxpool_resnet_f16_exact", POOL, [[2, 3, 9, 7], "f16", "max", [3, 3], [2, 2], [1, 1]], True),
    (
        "avgpool_pad_ceil_epi_f32",
        POOL,
        [[2, 3, 7, 8], "f32", "avg", [3, 3], [2, 2], [1, 1], [1, 1], True, True, True],
        False,
    ),
    ("mean_nchw_epi_f16", REDUCE, [[2, 6, 5, 7], "f16", "mean", [2, 3], True, True], False),
    ("mean_nhwc_epi_bf16", REDUCE, [[2, 5, 3, 40], "bf16", "mean", [1, 2], False, True], False),
    # DenseNet's transition as conv-layout leaves it: an NHWC input, the average pool's
    # value and its scale + relu both results (stored NCHW)
    (
        "cl_avgpool_two_results_f16",
        CL,
        [
            "avg_pool2d",
            [2, 16, 8, 6],
            "f16",
            "kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>",
            [2, 16, 4, 3],
            False,
            True,
            True,
            True,
        ],
        False,
    ),
    # values near 3e38, whose float32 sums overflow (issue #26): float64 partials, and a
    # float64 workspace between the two passes
    (
        "split_rows_mean_huge_bf16",
        REDUCE,
        [[2, 3, 20, 30], "bf16", "mean", [2, 3], True, False],
        "huge",
    ),
]


def _slow_cases() -> list[tuple]:
    """Every pooling attribute combination the reference supports, and every reduction
    layout, in each element type."""
    cases = []
    pools = [
        ("max_k2s2", "max", [2, 2], [2, 2], [0, 0], [1, 1], False, False),
        ("max_pad_asym_ceil", "max", [3, 3], [2, 2], [0, 1, 1, 0], [1, 1], True, False),
        ("max_dil2", "max", [2, 3], [1, 2], [1, 1], [2, 2], False, False),
        ("avg_nopad", "avg", [3, 3], [1, 1], [0, 0], [1, 1], False, False),
        ("avg_excl_pad", "avg", [3, 3], [2, 2], [1, 1], [1, 1], False, False),
        ("avg_incl_pad", "avg", [3, 2], [2, 2], [1, 1], [1, 1], False, True),
        ("avg_excl_ceil", "avg", [2, 2], [2, 2], [0, 0], [1, 1], True, False),
        ("avg_incl_ceil_dil", "avg", [3, 3], [2, 3], [1, 0, 0, 1], [2, 1], True, True),
    ]
    for name, kind, k, s, p, d, ceil, incl in pools:
        for dtype in DTYPES:
            exact = kind == "max"
            args = [[2, 3, 9, 11], dtype, kind, k, s, p, d, ceil, incl]
            suffix = "_exact" if exact else ""
            cases.append((f"pool_{name}_{dtype}{suffix}", "pool_program", args, exact))
            cases.append((f"pool_{name}_epi_{dtype}", "pool_program", [*args, True], False))
    reductions = [
        ("rows_long", [1, 3, 40, 40], [2, 3], True),  # 1600 per row: 256 lanes
        ("cols_long", [1, 30, 30, 5], [1, 2], False),  # NHWC mean over 900 pixels
        ("all", [3, 4, 5], [], False),
        ("first", [7, 3, 10], [0], True),
        ("last", [4, 33], [1], False),
        ("outer_inner", [4, 3, 5, 6], [0, 3], False),
    ]
    for name, shape, axes, keep in reductions:
        for kind in ("mean", "sum", "max"):
            for dtype in DTYPES:
                epi = bool(axes) and (keep or len(axes) < len(shape))
                args = [shape, dtype, kind, axes, keep, epi]
                exact = kind == "max" and not epi
                suffix = "_exact" if exact else ""
                cases.append((f"red_{name}_{kind}_{dtype}{suffix}", "reduce_program", args, exact))
    odd = [[1, 2, 8, 9], "bf16", "max", [3, 2], [2, 1], [1, 0, 0, 1], [2, 1], True]
    cases += [
        ("maxpool_ceil_dil_bf16_exact", POOL, odd, True),
        ("max_mid_f32_exact", REDUCE, [[3, 5, 4, 6], "f32", "max", [1], False, False], True),
        ("sum_split_axes_f32", REDUCE, [[3, 5, 4, 6], "f32", "sum", [0, 2], False, True], False),
        # signed zeros: of equal values numpy's max returns the later, across the lanes too
        ("max_zeros_rows_f32_exact", REDUCE, [[6, 70], "f32", "max", [1], False, False], "zeros"),
        ("max_zeros_cols_f16_exact", REDUCE, [[50, 3], "f16", "max", [0], True, False], "zeros"),
    ]
    two = "two_results_program"
    for dtype in DTYPES:
        cases.append((f"two_results_pool_{dtype}", two, [[2, 3, 7, 9], dtype, "max_pool2d"], False))
        cases.append((f"two_results_red_{dtype}", two, [[2, 3, 7, 9], dtype, "reduce_max"], False))
    cases += _channels_last_cases()
    cases += _split_cases()
    cases += _huge_cases()
    return cases


def _channels_last_cases() -> list[tuple]:
    """Hand-made groups as the conv layout writes them: an NHWC input viewed NCHW, the
    result stored NCHW or NHWC (pools) with and without an epilogue."""
    pool = "kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>"
    mean = "axes = array<i64: 2, 3>, keepdims = true"
    cases = []
    for dtype in DTYPES:
        for store in (False, True):
            for epi in (False, True):
                tag = f"{'nhwc' if store else 'nchw'}{'_epi' if epi else ''}_{dtype}"
                args = ["max_pool2d", [2, 16, 9, 7], dtype, pool, [2, 16, 5, 4], store, epi]
                name = f"cl_maxpool_{tag}" + ("" if epi else "_exact")
                cases.append((name, CL, args, not epi))
                args = ["avg_pool2d", [1, 8, 6, 7], dtype, pool, [1, 8, 3, 4], store, epi]
                cases.append((f"cl_avgpool_{tag}", CL, args, False))
        for epi in (False, True):  # an NCHW input stored NHWC (after an NCHW conv)
            args = ["max_pool2d", [2, 16, 9, 7], dtype, pool, [2, 16, 5, 4], True, epi, False]
            name = f"cl_maxpool_nchw_in{'_epi' if epi else ''}_{dtype}"
            cases.append((name + ("" if epi else "_exact"), CL, args, not epi))
        args = ["reduce_mean", [2, 40, 5, 3], dtype, mean, [2, 40, 1, 1], False, True]
        cases.append((f"cl_reduce_mean_epi_{dtype}", CL, args, False))
    return cases


#: The reduce template's thresholds for the two-pass cases: a reduction of over 2
#: elements a lane into fewer than 264 tiles splits, 1 element a lane and part.
SPLIT_SMALL = {"SPLIT_LANE_ELEMENTS": 2, "PART_LANE": 1}


def _split_cases() -> list[tuple]:
    """Two-pass reductions (a few outputs of long reductions) at simulator sizes."""
    cases = []
    for kind in ("mean", "sum", "max"):
        for dtype in DTYPES:
            exact = kind == "max"
            rows = [[2, 3, 20, 30], dtype, kind, [2, 3], True, not exact]
            cols = [[1, 25, 24, 3], dtype, kind, [1, 2], False, not exact]
            suffix = "_exact" if exact else ""
            cases.append((f"split_rows_{kind}_{dtype}{suffix}", REDUCE, rows, exact))
            cases.append((f"split_cols_{kind}_{dtype}{suffix}", REDUCE, cols, exact))
    zeros = [[1, 2, 40, 40], "f32", "max", [2, 3], True, False]
    cases.append(("split_zeros_f32_exact", REDUCE, zeros, "zeros"))
    for dtype in ("f32", "bf16"):  # float64 partials and workspace (issue #26)
        for kind, shape, axes, keep in (
            ("rows", [2, 3, 20, 30], [2, 3], True),
            ("cols", [1, 25, 24, 3], [1, 2], False),
        ):
            args = [shape, dtype, "mean", axes, keep, False]
            cases.append((f"split_{kind}_mean_huge_{dtype}", REDUCE, args, "huge"))
    return cases


def _huge_cases() -> list[tuple]:
    """Averages of values near float32's largest, 3e38 (issue #26: float32 sums of them
    overflowed), on one pass: pools and means, f32 and bf16 (f16's largest is 65504)."""
    cases = []
    for dtype in ("f32", "bf16"):
        pool = [[2, 3, 9, 11], dtype, "avg", [3, 3], [2, 2], [1, 1], [1, 1], True, True]
        cases.append((f"pool_avg_huge_{dtype}", POOL, pool, "huge"))
        for name, shape, axes, keep in (
            ("rows", [1, 3, 40, 40], [2, 3], True),
            ("all", [3, 4, 5], [], False),
        ):
            args = [shape, dtype, "mean", axes, keep, False]
            cases.append((f"red_{name}_mean_huge_{dtype}", REDUCE, args, "huge"))
        args = [
            "avg_pool2d",
            [1, 8, 6, 7],
            dtype,
            "kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>",
            [1, 8, 3, 4],
            True,
            False,
        ]
        cases.append((f"cl_avgpool_nhwc_huge_{dtype}", CL, args, "huge"))
    return cases


def _run_sim(cases: list[tuple]) -> dict:
    records = []
    for k, (name, builder, args, special) in enumerate(cases):
        record = {"name": name, "builder": builder, "args": args, "seed": k, "special": special}
        if name.startswith("split_"):
            record["reduce_constants"] = SPLIT_SMALL
        records.append(record)
    return run_simulator(HERE / "pool_reduce_sim.py", records, timeout=1200)


def _check_record(results: dict, name: str, builder: str) -> None:
    record = results.get(name)
    assert record is not None, f"{name}: no result from the simulator run"
    assert "error" not in record, record.get("error")
    # one kernel: the epilogue fused into the anchor's group, no PyTorch fallback
    reduces = builder == REDUCE or name.startswith(("cl_reduce", "two_results_red"))
    kind = "reduce" if reduces else "pool"
    assert record["kinds"] == [kind] and record["fallbacks"] == [], record
    assert record["passed"] and all(record["passed"]), record["details"]
    assert record["two_pass"] == name.startswith("split_"), "the two-pass path, or not"


@pytest.fixture(scope="module")
def quick_results() -> dict:
    return _run_sim(QUICK)


@pytest.mark.parametrize(("name", "builder"), [(c[0], c[1]) for c in QUICK])
def test_quick_case_under_simulator(quick_results: dict, name: str, builder: str) -> None:
    _check_record(quick_results, name, builder)


SLOW = _slow_cases()


@pytest.fixture(scope="module")
def slow_results() -> dict:
    return _run_sim(SLOW)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "builder"), [(c[0], c[1]) for c in SLOW])
def test_case_under_simulator(slow_results: dict, name: str, builder: str) -> None:
    _check_record(slow_results, name, builder)
