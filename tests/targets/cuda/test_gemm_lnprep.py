"""The LayerNorm prologue pre-pass (``aux.LayerNormPrep``) without a GPU: its grid and
the order of its memory operations in the linked cubin for sm_90a.

The fold of gamma into W adds the column sums of W' and beta W into ``cd`` with f32
atomics. Atomics to one cache line serialise in L2: on the H200 (2026-12-01) the MLP's
8192 x 1024 -> 4096 pre-pass took 18.3 us with 262K of them, 26 us with twice as many and
34 us with four times, where its 32 MB need about 8. Now a warp sums its 64 rows by
shuffles first and adds 16 bytes per atomic (``red.global.add.v4.f32``): 32K atomics,
10.5 us.
"""

from __future__ import annotations

import re

import pytest
from test_gemm_build import _sass, needs_toolchain

from fusec.targets.cuda.gemm import aux

SPECS = {
    "kxn-f16": aux.LayerNormPrep("f16", "f16", "f16", "n", 1e-5),
    "kxn-bf16-f32": aux.LayerNormPrep("bf16", "f32", "f32", "n", 1e-5),
    "nxk-f16": aux.LayerNormPrep("f16", "f16", "f16", "k", 1e-5),
    "nxk-bf16-f32": aux.LayerNormPrep("bf16", "f32", "bf16", "k", 1e-5),
}


def test_fold_grid_covers_w() -> None:
    kxn, nxk = SPECS["kxn-f16"], SPECS["nxk-f16"]
    # a K x N warp owns 32 columns x 8 * FOLD_ROWS rows, 8 warps a block
    rows = 8 * aux.FOLD_ROWS
    assert kxn.fold_blocks(1024, 4096) == 16 * (1024 // rows)
    assert kxn.fold_blocks(1000, 4097) == 17 * -(-1000 // rows)  # ragged edges get blocks too
    assert kxn.fold_blocks(256, 256) == 1 * (256 // rows)
    assert nxk.fold_blocks(1024, 4096) == 4096 // 8  # a warp per row of W
    assert aux.LayerNormPrep.stat_blocks(8193) == -(-8193 // (8 * aux.STAT_ROWS))  # 8 warps a block


def _first_store_line(sass: str) -> int:
    lines = sass.splitlines()
    return next(i for i, line in enumerate(lines) if re.search(r"\bSTG\.E\.128\b", line))


@needs_toolchain
@pytest.mark.parametrize("name", list(SPECS))
def test_prepass_cubin_has_no_spills(name: str, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    built = build.build(SPECS[name], KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    sass = _sass(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    assert "STG.E.128" in sass, "the fold stores 16 bytes at a time"
    if name.startswith("kxn"):
        assert "REDG.E.ADD.F32x4" in sass, "column sums go out 16 bytes per atomic"


@needs_toolchain
def test_kxn_fold_issues_all_loads_before_its_first_store(tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    sass = _sass(build.build(SPECS["kxn-f16"], KernelCache(tmp_path)).cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    before = sass.splitlines()[: _first_store_line(sass)]
    wide_loads = [line for line in before if re.search(r"\bLDG\.E\.128\.CONSTANT\b", line)]
    assert len(wide_loads) >= aux.FOLD_ROWS, "\n".join(before[-40:])
