"""``cpu-channels-last``: the target-independent ``channels-last`` pass
(``fusec.passes.channels_last``, issue 30) on the cpu's float32 depthwise stages, run after
``fuse`` in the cpu pipeline (``fusec-cpu``); the cpu conv template runs the relaid
depthwise groups in ``fusec.targets.cpu.depthwise_nhwc``."""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import channels_last
from fusec.passes.channels_last import LAYOUT_ATTR, TO_NCHW, TO_NHWC, relaid_groups, relayout_block

__all__ = [
    "LAYOUT_ATTR",
    "TO_NCHW",
    "TO_NHWC",
    "ChannelsLastPass",
    "relaid_groups",
    "relayout_block",
]


@dataclass(frozen=True)
class ChannelsLastPass(channels_last.ChannelsLastPass):
    """``channels-last`` on float32 groups (the cpu's NHWC depthwise kernel's type)."""

    name = "cpu-channels-last"

    dtypes: str = "f32"
