"""The implicit-GEMM conv's split-K on the GPU vs the float64 reference (skipped without a
GPU): ResNet-50's batch-1 convs, which the heuristic gives the narrow tile with the
reduction split (``conv.config.choose_tile`` with ``$FUSEC_SPLIT_K`` on), and forced
splits that leave some splits empty. Fresh random inputs, outputs poisoned (NaN) first,
the routing and the split read from the kernel's header, so a case cannot pass on another
path; a split kernel called again and again gives the same bits (the counters reset
themselves, the partials are added in split order).
"""

from __future__ import annotations

import pytest
from numerics import assert_close
from test_conv_gpu import conv_graph

pytestmark = pytest.mark.gpu

CASES = {
    # name: (graph, the tile the header must name)
    "resnet-7x7-3x3-512": (  # one 8x8 strip: 4 tiles, 8 splits
        conv_graph(1, 512, 7, 7, 512, 3, 3, pad=(1, 1)),
        "128x64 s8 c2m sk=8",
    ),
    "resnet-14x14-3x3-256-residual": (  # four strips of 4 rows of 16
        conv_graph(1, 256, 14, 14, 256, 3, 3, pad=(1, 1), tail="residual"),
        "128x64 s8 c2m sk=8",
    ),
    "resnet-14x14-1x1-1024-bn": (  # its 196 pixels as one row: 8 tiles, 5 splits
        conv_graph(1, 1024, 14, 14, 256, 1, 1, tail="bn"),
        "128x64 s8 c2m sk=5",
    ),
    "resnet-56x56-3x3-64": (
        conv_graph(1, 64, 56, 56, 64, 3, 3, pad=(1, 1)),
        "64x128 s6 c2n sk=3",
    ),
    "resnet-stride2-3x3-256-bf16": (
        conv_graph(1, 256, 28, 28, 256, 3, 3, t="bf16", stride=(2, 2), pad=(1, 1)),
        "sk=",
    ),
}


def _compiled(text: str, tile: str):
    import fusec

    compiled = fusec.compile(text, target="cuda")
    (kernel,) = [k for k in compiled.kernels if k.kind == "conv"]
    head = kernel.source.split("\n\n")[0]
    assert "implicit-GEMM" in head and tile in head, head[:600]
    return compiled


def _check(compiled, name: str) -> None:
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


@pytest.mark.parametrize("name", list(CASES))
def test_batch_one_convs_split_their_reduction(name: str, monkeypatch) -> None:
    monkeypatch.setenv("FUSEC_SPLIT_K", "on")  # the heuristic's tiles (opt-in for now)
    text, tile = CASES[name]
    _check(_compiled(text, tile), name)


def test_more_splits_than_steps_leave_empty_splits(monkeypatch) -> None:
    """A 1x1 conv of 128 channels has 2 reduction steps; 16 splits leave 14 empty (zeros)."""
    monkeypatch.setenv("FUSEC_CONV_TILE", "128x64 s8 c2m sk=16")
    text = conv_graph(1, 128, 7, 7, 256, 1, 1)
    _check(_compiled(text, "sk=16"), "empty splits")


def test_repeated_calls_give_the_same_bits(monkeypatch) -> None:
    import numpy as np

    monkeypatch.setenv("FUSEC_SPLIT_K", "on")

    from fusec.runtime.reference import entry_function
    from fusec.tools.runner import random_inputs

    text, tile = CASES["resnet-7x7-3x3-512"]
    compiled = _compiled(text, tile)
    args = random_inputs(entry_function(compiled.module), seed=5)
    (first,) = compiled._runner(args, poison=True)
    first = np.asarray(first).copy()
    for _ in range(20):
        (again,) = compiled._runner(args, poison=True)
        assert np.array_equal(np.asarray(again), first)
    assert not np.isnan(first.astype(np.float32)).any()
