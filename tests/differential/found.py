"""Graphs the long random runs found failing, kept as explicit examples of the properties.

Each is the shrunk falsifying example hypothesis printed, rebuilt here so that
the property that found it runs it first on every run (``@example``), the CI
profile included. Add one per finding, with what it found.
"""

from __future__ import annotations

import numpy as np
from strategies import Arg, Const, Graph, Node

from fusec.dialect import ops as ai
from fusec.dialect.shapes import TensorSpec


def _f32(*shape: int) -> TensorSpec:
    return TensorSpec(shape, "f32")


#: ``batch_norm`` of a rank-2 input with run-time statistics: its decomposition
#: reshaped the (C,) mean and factor to (C,), an identity reshape only the next
#: canonicalisation removed, so ``fusec-default`` was not idempotent.
BATCH_NORM_RANK_2 = Graph(
    (
        Arg(_f32(1, 1)),
        Arg(_f32(1)),
        Const(_f32(1), np.array([0.125])),
        Arg(_f32(1)),
        Const(_f32(1), np.array([1.5])),
        Node(ai.BatchNormOp, (0, 1, 2, 3, 4), (("epsilon", 1e-5),), _f32(1, 1)),
    ),
    (5, 0, 1, 3, 5),
)

_POOL = (
    ("ceil_mode", False),
    ("count_include_pad", False),
    ("dilations", (1, 1)),
    ("kernel", (1, 1)),
    ("padding", (0, 0)),
    ("strides", (1, 1)),
)

#: A constant first written for an op that is dead (removed by the pipeline) and
#: used again later: the traced function makes a constant per use, the text one
#: per value, and after the dead op went the constants stood in a different order
#: (traced and written graphs compiled to different IR).
CONSTANT_ORDER = Graph(
    (
        Arg(_f32()),
        Const(_f32(), np.array(0.125)),
        Node(ai.AddOp, (0, 1), (), _f32()),
        Arg(_f32(1, 1, 1, 1)),
        Node(ai.AvgPool2DOp, (3,), _POOL, _f32(1, 1, 1, 1)),
        Const(_f32(1), np.array([0.125])),
        Node(ai.BiasAddOp, (4, 5), (("axis", 0),), _f32(1, 1, 1, 1)),
        Node(ai.ReluOp, (1,), (), _f32()),
    ),
    (6, 7),
)

#: A bias added along axis 0 (``bias_add``) and again as a trailing broadcast
#: operand (``add``): the planner put both in one pointwise group, whose code
#: generator needs one indexing per input, so compiling it failed.
BIAS_TWO_INDEXINGS = Graph(
    (
        Arg(_f32(3, 3, 3, 3)),
        Arg(_f32(3)),
        Node(ai.BiasAddOp, (0, 1), (("axis", -4),), _f32(3, 3, 3, 3)),
        Node(ai.AddOp, (2, 1), (), _f32(3, 3, 3, 3)),
    ),
    (3,),
)


def _f16(*shape: int) -> TensorSpec:
    return TensorSpec(shape, "f16")


#: A mask constant used by a dead ``where`` and again as an operand after two other
#: constants of a live one: the traced function made a second copy of the mask, so
#: after the dead op went its constants stood in another order than the text's
#: (constants first used by the same op kept their block order).
CONSTANT_OPERAND_ORDER = Graph(
    (
        Arg(_f16(8, 2, 17)),
        Arg(_f16(8, 2, 17)),
        Const(_f16(1, 2, 17), np.random.default_rng(0).integers(0, 2, (1, 2, 17)).astype(float)),
        Const(_f16(2, 8, 2, 1), np.full((2, 8, 2, 1), 0.25)),
        Const(_f16(), np.array(0.0)),
        Const(_f16(17), np.full(17, 0.25)),
        Node(ai.AddOp, (1, 0), (), _f16(8, 2, 17)),
        Node(ai.WhereOp, (2, 6, 3), (), _f16(2, 8, 2, 17)),
        Node(ai.WhereOp, (4, 5, 2), (), _f16(1, 2, 17)),
        Node(ai.IsNanOp, (2,), (), _f16(1, 2, 17)),
    ),
    (9, 8),
)
