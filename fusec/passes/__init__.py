"""Passes and pipelines over ai IR.

``available_passes()`` maps kebab-case names to pass classes (ours and the xDSL
passes we reuse); ``build_pipeline(spec)`` turns an xDSL pass-pipeline spec
(``infer-shapes,canonicalize``) into a ``PassPipeline``. Named pipelines such
as ``fusec-default`` expand in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from xdsl.passes import ModulePass, PassPipeline

PIPELINES: dict[str, str] = {
    "fusec-default": "infer-shapes,recognize-patterns,canonicalize,cse,fuse",
    # the cuda target: patchify convs as GEMMs, fusion, the channels-last layout of the
    # conv groups (explicit conversions), then the Tensor Core tile of every GEMM group
    "fusec-cuda": "infer-shapes,recognize-patterns,conv-patchify,canonicalize,cse,fuse,"
    "conv-layout,tile-gemm",
    # ... with a softmax of any row length in its matmul's group (rows longer than a block
    # tile: the GEMM's partials epilogue and a finalise pass). Measured slower than the
    # softmax as its own kernel on the H200 (benchmarks/results/gemm-2026-11-30.md, git
    # history, 0fa3236), so not the default
    "fusec-cuda-long-softmax": "infer-shapes,recognize-patterns,conv-patchify,canonicalize,cse,"
    "fuse{softmax_tile_limit=1048576},conv-layout,tile-gemm",
}


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def infer_shapes():
        from fusec.passes.infer_shapes import InferShapesPass

        return InferShapesPass

    def canonicalize():
        from xdsl.transforms.canonicalize import CanonicalizePass

        return CanonicalizePass

    def recognize_patterns():
        from fusec.passes.recognize import RecognizePatternsPass

        return RecognizePatternsPass

    def cse():
        from xdsl.transforms.common_subexpression_elimination import (
            CommonSubexpressionElimination,
        )

        return CommonSubexpressionElimination

    def dce():
        from xdsl.transforms.dead_code_elimination import DeadCodeElimination

        return DeadCodeElimination

    def fusion(name: str) -> Callable[[], type[ModulePass]]:
        def load() -> type[ModulePass]:
            from fusec.passes.fusion.driver import FusePass, stage_pass

            return FusePass if name == "fuse" else stage_pass(name.removeprefix("fuse-"))

        return load

    def target_pass(where: str) -> Callable[[], type[ModulePass]]:
        def load() -> type[ModulePass]:
            import importlib

            module, _, cls = where.partition(":")
            return getattr(importlib.import_module(module), cls)

        return load

    from fusec.passes.fusion.planner import STAGE_ORDER
    from fusec.target import TARGET_PASSES

    return {
        "infer-shapes": infer_shapes,
        "recognize-patterns": recognize_patterns,
        "canonicalize": canonicalize,
        "cse": cse,
        "dce": dce,
        "fuse": fusion("fuse"),
        **{f"fuse-{stage}": fusion(f"fuse-{stage}") for stage in STAGE_ORDER},
        **{name: target_pass(where) for name, where in TARGET_PASSES.items()},
    }


def expand_spec(spec: str) -> str:
    """Replace named pipelines (``fusec-default``) by their passes (recursively)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    return ",".join(expand_spec(PIPELINES[p]) if p in PIPELINES else p for p in parts)


def build_pipeline(
    spec: str | None = None, callback=None, target: str | None = None, sms: int = 0
) -> PassPipeline:
    """A PassPipeline from an xDSL pipeline spec; ``None`` means ``fusec-default``.

    ``target`` becomes the ``target`` option of every fusion pass that does not
    name one itself: the groups are then planned for that back end. ``sms`` (when
    not 0) becomes the ``sms`` option of a ``tile-gemm`` that does not set one: the
    device the tiles are chosen for, resolved once by the caller.
    """
    pipeline = _parse_pipeline(spec, callback)
    if target is None and not sms:
        return pipeline
    from fusec.passes.fusion.driver import FusePass

    def configured(p: ModulePass) -> ModulePass:
        if target is not None and isinstance(p, FusePass) and p.target is None:
            return replace(p, target=target)
        if sms and p.name == "tile-gemm" and not getattr(p, "sms", 0):
            # by name: shared modules import no target (tests/test_architecture.py)
            tiling: Any = p
            return replace(tiling, sms=sms)
        return p

    return PassPipeline(tuple(configured(p) for p in pipeline.passes), pipeline.callback)


def _parse_pipeline(spec: str | None, callback) -> PassPipeline:
    from xdsl.utils.exceptions import ArgSpecParseError

    from fusec.errors import FusecError

    if spec is not None and not isinstance(spec, str):
        raise FusecError(f"a pass pipeline must be a string, got {type(spec).__name__}")
    spec = expand_spec("fusec-default" if spec is None else spec)
    try:
        return PassPipeline.parse_spec(available_passes(), spec, callback)
    except ArgSpecParseError as err:  # a BaseException in xDSL: syntax (unbalanced braces)
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        where = next((ln.rsplit(":", 1)[-1] for ln in lines if ln.startswith("pass-pipeline:")), "")
        column = f" at column {where}" if where.isdigit() else ""
        raise FusecError(f"bad pass pipeline '{spec}'{column}: {lines[-1]}") from None
    except Exception as err:  # xDSL raises ValueError/PassPipelineParseError
        known = ", ".join([*available_passes(), *PIPELINES])
        raise FusecError(f"bad pass pipeline '{spec}': {err} (known passes: {known})") from None
