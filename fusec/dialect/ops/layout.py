"""Layout ops: reshape, transpose, slice, concat, gather (views where they can be)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, traits_def, var_operand_def
from xdsl.traits import Pure

from fusec.dialect import shapes
from fusec.dialect.facts import Pattern
from fusec.dialect.ops.base import (
    AiOp,
    Canonicalized,
    OneInputOp,
    _property_problem,
    int_array_prop,
    int_prop,
    python_value,
    result,
)
from fusec.dialect.shapes import ShapeError
from fusec.ir.dtypes import ALL_TYPES, NUMERIC_TYPES
from fusec.ir.tensors import spec_of, tensor_type

if TYPE_CHECKING:
    import numpy as np


class LayoutOp(OneInputOp):
    """An op that rearranges the elements of its one input (of any element type) and
    computes none: each result element is one input element (injective). Reshape,
    transpose, slice and gather; ``ai.concat`` (several inputs) declares its own."""

    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES

    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE


@irdl_op_definition
class ReshapeOp(LayoutOp):
    """The same elements in row-major order under the static shape ``shape``."""

    name = "ai.reshape"
    shape = int_array_prop()
    traits = traits_def(Pure(), Canonicalized())

    SHAPE_FUNCTION = shapes.reshape

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.reshape(args[0], self.attr("shape"))


@irdl_op_definition
class TransposeOp(LayoutOp):
    """Permuted dims: result dim i is input dim ``perm[i]``."""

    name = "ai.transpose"
    perm = int_array_prop()
    traits = traits_def(Pure(), Canonicalized())

    SHAPE_FUNCTION = shapes.transpose

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.ascontiguousarray(np.transpose(args[0], self.attr("perm")))


@irdl_op_definition
class SliceOp(LayoutOp):
    """A strided sub-tensor: along dim d, elements ``offsets[d] + i * strides[d]`` for
    i < ``sizes[d]`` (as ``tensor.extract_slice``; a stride may be negative)."""

    name = "ai.slice"
    offsets = int_array_prop()
    sizes = int_array_prop()
    strides = int_array_prop()

    SHAPE_FUNCTION = shapes.slice_

    def index(self) -> tuple[slice, ...]:
        """The numpy index of the slice."""
        out = []
        for start, size, step in zip(
            self.attr("offsets"), self.attr("sizes"), self.attr("strides"), strict=True
        ):
            stop = start + size * step
            out.append(slice(start, None if stop < 0 else stop, step))
        return tuple(out)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.ascontiguousarray(np.asarray(args[0])[self.index()])


@irdl_op_definition
class ConcatOp(AiOp):
    """The operands joined along ``axis`` (their other dims agree)."""

    name = "ai.concat"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    inputs = var_operand_def(TensorType)
    output = result()
    axis = int_prop(0)
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE

    def __init__(self, *operands: SSAValue, **attrs: Any) -> None:
        properties = self.encode_attrs(attrs)
        specs = [spec_of(v.type) for v in operands]
        result_type = tensor_type(self.infer_spec(specs, properties, None))
        IRDLOperation.__init__(
            self, operands=[list(operands)], result_types=[result_type], properties=properties
        )

    @classmethod
    def infer_spec(cls, operands, properties, to_type):
        attr = properties.get("axis")
        prop = cls.declared_properties()["axis"]
        if attr is not None and (problem := _property_problem("axis", prop, attr)) is not None:
            raise ShapeError(f"{cls.name}: {problem}")
        axis = python_value(attr if attr is not None else prop.default_value)
        cls.check_dtypes(operands)
        return shapes.concat(operands, axis=axis)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.concatenate(args, axis=self.attr("axis"))


@irdl_op_definition
class GatherOp(LayoutOp):
    """The slices ``indices`` (constants) of dim ``axis``, in that order."""

    name = "ai.gather"
    axis = int_prop(0)
    indices = int_array_prop()

    SHAPE_FUNCTION = shapes.gather

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.take(args[0], list(self.attr("indices")), axis=self.attr("axis"))


@irdl_op_definition
class RotateHalfOp(OneInputOp):
    """The rotate-half of rotary position embeddings (RoPE): ``concat(-x[..., n/2:],
    x[..., :n/2])`` along the last axis of even size ``n``, as Llama-style models write
    ``q * cos + rotate_half(q) * sin``. No copy of its own: element ``i`` of the last axis
    is ``x[(i + n/2) % n]``, negated for ``i < n/2``, and the pointwise kernels read their
    group input ``x`` at that index (issue 28/30; the canonical form of the
    slice/neg/concat spelling, ``dialect/canonical.py``)."""

    name = "ai.rotate_half"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES

    PATTERN: ClassVar[Pattern] = Pattern.BROADCAST
    INDEX_MAPPED: ClassVar[bool] = True

    SHAPE_FUNCTION = shapes.rotate_half

    def half(self) -> int:
        """n/2: the shift along the last axis."""
        return spec_of(self.input.type).shape[-1] // 2

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        x = args[0]
        h = x.shape[-1] // 2
        return np.concatenate([np.negative(x[..., h:]), x[..., :h]], axis=-1)
