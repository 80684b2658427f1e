"""The memory layouts of a conv group (``fusec.layout``): what the ``conv-layout`` pass
(``conv.layout``) writes and the conv templates (``conv.template``) and the copy
template read, kept apart from both so that neither imports the other for them."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import DictionaryAttr, StringAttr

from fusec.dialect import ops as ai

#: NCHW -> NHWC, and KCRS -> KRSC (the same permutation of a 4-D tensor)
TO_CHANNELS_LAST = (0, 2, 3, 1)
#: NHWC -> NCHW, and KRSC -> KCRS
TO_CHANNELS_FIRST = (0, 3, 1, 2)
LAYOUT_ATTR = "fusec.layout"


@dataclass(frozen=True)
class Layout:
    """How a conv group's input, weights and result are laid out in memory."""

    input: str = "nchw"
    weight: str = "kcrs"
    output: str = "nchw"
    #: the epilogue's inputs of the output's shape (a residual): "nhwc" when the group
    #: reads them channels-last (each viewed NCHW by a leading ``ai.transpose``)
    residual: str = "nchw"

    def to_attr(self) -> DictionaryAttr:
        entries = {
            "input": StringAttr(self.input),
            "weight": StringAttr(self.weight),
            "output": StringAttr(self.output),
        }
        if self.residual != "nchw":  # written only when it says something
            entries["residual"] = StringAttr(self.residual)
        return DictionaryAttr(entries)


#: what each entry of ``fusec.layout`` may be (the first: the NCHW/KCRS default)
LAYOUT_CHOICES = {
    "input": ("nchw", "nhwc"),
    "weight": ("kcrs", "krsc"),
    "output": ("nchw", "nhwc"),
    "residual": ("nchw", "nhwc"),
}


def layout_of(fused_op: ai.FusedOp) -> Layout | str:
    """The group's ``fusec.layout`` (the NCHW/KCRS default without one), or what is wrong
    with it."""
    attr = fused_op.attributes.get(LAYOUT_ATTR)
    if attr is None:
        return Layout()
    if not isinstance(attr, DictionaryAttr):
        return f"{LAYOUT_ATTR} must be a dictionary, got {attr}"
    values = {}
    for key, value in attr.data.items():
        choices = LAYOUT_CHOICES.get(key)
        if choices is None:
            known = ", ".join(LAYOUT_CHOICES)
            return f"{LAYOUT_ATTR}: unknown entry {key!r} (expected {known})"
        if not isinstance(value, StringAttr) or value.data not in choices:
            expected = " or ".join(f'"{c}"' for c in choices)
            return f"{LAYOUT_ATTR}: {key} must be {expected}, got {value}"
        values[key] = value.data
    return Layout(**values)
