"""How cuda copy groups are planned (``fusec.targets.cuda.strided``) and what their fast
kernels compile to for sm_90.

The strided view of a reshape must be numpy's (a view exactly when numpy's reshape
needs no copy, over the same elements); each group of ``test_gather_copy`` must take
its path (``PATHS`` there); the vectorised kernels' PTX must move their data with one
128-, 64- or 32-bit access per vector, the tiled transpose's through shared memory.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from test_gather_copy import NAMES, cases, expected_path, path_of

from fusec.targets.cuda.env import simulator_enabled
from fusec.targets.cuda.strided import View, collapse_view, view_reshape


def _factor(n: int, rng: np.random.Generator) -> tuple[int, ...]:
    """A random shape of ``n`` elements, size-1 dims included."""
    dims = []
    while n > 1:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = int(rng.choice(divisors))
        dims.append(d)
        n //= d
        if rng.random() < 0.2:
            dims.append(1)
    rng.shuffle(dims)
    return tuple(dims) or (1,)


def _random_view(rng: np.random.Generator) -> np.ndarray:
    """A transposed, sliced (steps of 1 or 2, some reversed) view of an arange."""
    shape = tuple(int(rng.integers(1, 6)) for _ in range(int(rng.integers(1, 5))))
    base = np.arange(math.prod(shape) * 8).reshape(*shape[:-1], shape[-1] * 8)
    view = base.transpose(rng.permutation(base.ndim))
    index = []
    for size in view.shape:
        step = int(rng.choice([1, 1, 2, -1]))
        start = int(rng.integers(0, size))
        index.append(slice(start, None, step) if step > 0 else slice(start, None, -1))
    return view[tuple(index)]


def test_view_reshape_is_numpys() -> None:
    rng = np.random.default_rng(3)
    checked = views = 0
    while checked < 400:
        view = _random_view(rng)
        if view.size == 0:
            continue
        new = _factor(view.size, rng)
        strides = tuple(s // view.itemsize for s in view.strides)
        ours = view_reshape(view.shape, strides, new)
        try:
            theirs = view.reshape(new, copy=False)
        except ValueError:
            theirs = None
        assert (ours is None) == (theirs is None), (view.shape, strides, new)
        if ours is not None:
            # the same elements: read through our strides from the view's first element
            first = view.reshape(-1)[0] if view.size else 0
            flat = view.base.reshape(-1) if view.base is not None else view.reshape(-1)
            picked = np.array(
                [
                    flat[first + sum(i * s for i, s in zip(idx, ours, strict=True))]
                    for idx in np.ndindex(*new)
                ]
            ).reshape(new)
            np.testing.assert_array_equal(picked, theirs)
            views += 1
        checked += 1
    assert views > 100  # both outcomes are exercised


def test_collapse_merges_runs_and_drops_unit_dims() -> None:
    # the head split of [2, 197, 12, 64]: nothing merges but the unit dim goes
    view = View(0, (2, 12, 1, 197, 64), (151296, 64, 7, 768, 1), 0)
    assert collapse_view(view) == View(0, (2, 12, 197, 64), (151296, 64, 768, 1), 0)
    # [B, S, H, D] -> [B, H, D, S]: H and D are one run in the source
    view = View(0, (2, 12, 64, 197), (151296, 64, 1, 768), 0)
    assert collapse_view(view) == View(0, (2, 768, 197), (151296, 1, 768), 0)
    # a whole contiguous tensor at an offset: one dim
    assert collapse_view(View(1, (3, 4, 5), (20, 5, 1), 9)) == View(1, (60,), (1,), 9)


@pytest.mark.requires_target("cuda")
def test_each_group_takes_its_path() -> None:
    import fusec

    for name in NAMES:
        case, dtype = name.rsplit("-", 1)
        compiled = fusec.compile(
            cases(dtype)[case], target="cuda", pipeline="infer-shapes", executable=False
        )
        (kernel,) = compiled.kernels
        assert path_of(kernel.source) == expected_path(name), name


#: (case, dtype) -> the access its PTX must use for every global load and store
ACCESSES = {
    ("qkv_slice_split", "f16"): ("ld.global.v4.u32", "st.global.v4.b32"),
    ("head_split", "f16"): ("ld.global.v2.u32", "st.global.v2.b32"),
    ("vector_edges", "f16"): ("ld.global.u32", "st.global.b32"),
    ("vector_edges", "f32"): ("ld.global.v2.u32", "st.global.v2.b32"),
}


def _ptx(case: str, dtype: str) -> str:
    import fusec

    compiled = fusec.compile(
        cases(dtype)[case], target="cuda", pipeline="infer-shapes", executable=False
    )
    ((_, ptx),) = compiled.assembly("sm_90")
    assert ".target sm_90" in ptx and ".local" not in ptx
    return ptx


@pytest.mark.requires_target("cuda")
@pytest.mark.skipif(simulator_enabled(), reason="no PTX under the simulator")
@pytest.mark.parametrize(("case", "dtype"), list(ACCESSES))
def test_vectorised_ptx_moves_whole_vectors(case: str, dtype: str) -> None:
    ptx = _ptx(case, dtype)
    load, store = ACCESSES[(case, dtype)]
    global_accesses = re.findall(r"\b(?:ld|st)\.global\.[\w.]+", ptx)
    assert sorted(set(global_accesses)) == [load, store], global_accesses
    assert ".shared" not in ptx
    assert not re.search(r"(mul\.hi|div|rem)\.s64", ptx)  # 32-bit index arithmetic


@pytest.mark.requires_target("cuda")
@pytest.mark.skipif(simulator_enabled(), reason="no PTX under the simulator")
def test_gather_ptx_divides_in_32_bits() -> None:
    ptx = _ptx("gather_table", "f16")
    assert "mul.hi.u32" in ptx or "mul.wide.u32" in ptx
    assert not re.search(r"(mul\.hi|div|rem)\.s64", ptx)


#: (case, dtype) -> bytes of the padded shared tile
TILES = {
    ("k_transpose", "f16"): 128 * 9 * 2,  # 8 x 37 -> 37 x 8: an 8 x 128 tile
    ("k_transpose", "f32"): 128 * 9 * 4,
    ("wide_transpose", "bf16"): 64 * 66 * 2,
    ("wide_transpose", "f32"): 32 * 33 * 4,
}


@pytest.mark.requires_target("cuda")
@pytest.mark.skipif(simulator_enabled(), reason="no PTX under the simulator")
@pytest.mark.parametrize(("case", "dtype"), list(TILES))
def test_tiled_transpose_ptx_goes_through_shared_memory(case: str, dtype: str) -> None:
    ptx = _ptx(case, dtype)
    width = "f32" if dtype == "f32" else "u16"
    shared = re.search(r"\.shared \.align \d+ \.b8 \S+\[(\d+)\]", ptx)
    assert shared and int(shared.group(1)) == TILES[(case, dtype)]
    assert f"st.shared.{width}" in ptx and f"ld.shared.{width}" in ptx
    assert "bar.sync" in ptx
    if case == "wide_transpose":  # whole tiles: 16 loads off one address, no bounds
        assert re.search(rf"ld\.global\.{width}\s+%\w+, \[%rd\d+\+\d+\]", ptx)


@pytest.mark.slow
@pytest.mark.requires_target("cuda")
def test_copy_bench_smoke_runs_bit_exact() -> None:
    """``benchmarks/copy_bench.py --smoke``: its cases under the simulator, fast path and
    gather baseline, bit for bit against numpy (the GPU run's correctness check)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "copy_bench.py"
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 6 and all(line.endswith("bit-exact") for line in lines), lines
