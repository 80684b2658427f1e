"""The shape helpers the cpu and cuda templates share (``codegen.expr``): ``coalesce``
(the merged iteration space of a loop over broadcast operands) and ``merged_runs`` (a
strided view's dims without unit ones, runs merged), each checked against what it must
preserve: the elements every operand reads, the offsets a view walks, in order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fusec.codegen.expr import coalesce, merged_runs

RNG = np.random.default_rng(2727)


def _case(rank: int) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    space = tuple(int(n) for n in RNG.choice([1, 2, 3], rank))
    shapes = []
    for _ in range(3):
        keep = RNG.integers(0, rank + 1)  # right-aligned, a random rank
        shape = [n if RNG.random() < 0.6 else 1 for n in space[rank - keep :]]
        shapes.append(tuple(shape))
    return space, shapes


@pytest.mark.parametrize("rank", range(1, 6))
def test_coalesce_keeps_every_operands_elements_in_loop_order(rank: int) -> None:
    for _ in range(20):
        _check_coalesce(*_case(rank))


def _check_coalesce(space: tuple[int, ...], shapes: list[tuple[int, ...]]) -> None:
    merged, merged_shapes = coalesce(space, shapes)
    assert int(np.prod(merged)) == int(np.prod(space))
    assert 1 not in merged or merged == (1,)
    for shape, new in zip(shapes, merged_shapes, strict=True):
        x = RNG.standard_normal(shape or (1,)).reshape(shape)
        want = np.broadcast_to(x, space).reshape(-1)
        got = np.broadcast_to(x.reshape(new), merged).reshape(-1)
        np.testing.assert_array_equal(got, want)
        assert all(d in (1, m) for d, m in zip(new, merged, strict=True))


def test_coalesce_examples() -> None:
    assert coalesce((2, 3, 4), [(2, 3, 4), (4,)]) == ((6, 4), [(6, 4), (1, 4)])
    assert coalesce((2, 1, 3), [(2, 1, 3), (1, 1, 3)]) == ((2, 3), [(2, 3), (1, 3)])
    assert coalesce((1, 1), [(1,), (1, 1)]) == ((1,), [(1,), (1,)])


@pytest.mark.parametrize("seed", range(2))
def test_merged_runs_walk_the_same_offsets(seed: int) -> None:
    for _ in range(40):
        _check_runs(seed)


def _check_runs(seed: int) -> None:
    dims = [(int(RNG.integers(1, 4)), int(RNG.choice([0, 1, 2, 3, 6, 12]))) for _ in range(4)]
    if seed % 2:  # one contiguous run: each stride the inner size times the inner stride
        stride, dims = 1, []
        for n in RNG.integers(1, 4, 4)[::-1]:
            dims.insert(0, (int(n), stride))
            stride *= int(n)

    def offsets(ds: list[tuple[int, int]]) -> list[int]:
        return [
            sum(i * s for i, (_, s) in zip(ix, ds, strict=True))
            for ix in itertools.product(*(range(n) for n, _ in ds))
        ]

    runs = merged_runs(dims)
    assert offsets(runs) == offsets(dims)
    assert all(n != 1 for n, _ in runs)
    if seed % 2:
        assert len(runs) <= 1


def test_merged_runs_examples() -> None:
    assert merged_runs([(2, 12), (3, 4), (4, 1)]) == [(24, 1)]
    assert merged_runs([(2, 8), (1, 99), (3, 1)]) == [(2, 8), (3, 1)]
    assert merged_runs([(1, 5)]) == []
