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

#: The pipelines every target shares; a target names its own (``Target.pipelines``:
#: ``fusec-cuda``...), which ``named_pipelines`` adds.
PIPELINES: dict[str, str] = {
    "fusec-default": "infer-shapes,recognize-patterns,canonicalize,fold-quantized-weights,cse,"
    "demote-upcasts,sink-transposes,combine-projections,fuse",
}


def named_pipelines() -> dict[str, str]:
    """Every named pipeline: the shared ones and the targets' own."""
    from fusec.target import target_pipelines

    return {**PIPELINES, **target_pipelines()}


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def infer_shapes():
        from fusec.passes.infer_shapes import InferShapesPass

        return InferShapesPass

    def canonicalize():
        from xdsl.transforms.canonicalize import CanonicalizePass

        return CanonicalizePass

    def fold_quantized_weights():
        from fusec.passes.fold_quantized_weights import FoldQuantizedWeightsPass

        return FoldQuantizedWeightsPass

    def recognize_patterns():
        from fusec.passes.recognize import RecognizePatternsPass

        return RecognizePatternsPass

    def demote_upcasts():
        from fusec.passes.demote_upcasts import DemoteUpcastsPass

        return DemoteUpcastsPass

    def combine_projections():
        from fusec.passes.combine_projections import CombineProjectionsPass

        return CombineProjectionsPass

    def sink_transposes():
        from fusec.passes.sink_transposes import SinkTransposesPass

        return SinkTransposesPass

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
    from fusec.target import target_passes

    return {
        "infer-shapes": infer_shapes,
        "recognize-patterns": recognize_patterns,
        "canonicalize": canonicalize,
        "fold-quantized-weights": fold_quantized_weights,
        "cse": cse,
        "demote-upcasts": demote_upcasts,
        "sink-transposes": sink_transposes,
        "combine-projections": combine_projections,
        "dce": dce,
        "fuse": fusion("fuse"),
        **{f"fuse-{stage}": fusion(f"fuse-{stage}") for stage in STAGE_ORDER},
        **{name: target_pass(where) for name, where in target_passes().items()},
    }


def expand_spec(spec: str) -> str:
    """Replace named pipelines (``fusec-default``) by their passes (recursively)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    named = named_pipelines()
    return ",".join(expand_spec(named[p]) if p in named else p for p in parts)


def build_pipeline(
    spec: str | None = None,
    callback=None,
    target: str | None = None,
    sms: int = 0,
    tuned: bool = False,
) -> PassPipeline:
    """A PassPipeline from an xDSL pipeline spec; ``None`` means ``fusec-default``.

    ``target`` becomes the ``target`` option of every fusion pass that does not
    name one itself: the groups are then planned for that back end. ``sms`` (when
    not 0) becomes the ``sms`` option of a ``tile-gemm`` that does not set one: the
    device the tiles are chosen for, resolved once by the caller; ``tuned`` sets its
    ``tuned`` option (``fusec tune`` records as an input).
    """
    pipeline = _parse_pipeline(spec, callback)
    if target is None and not sms and not tuned:
        return pipeline
    from fusec.passes.fusion.driver import FusePass

    def configured(p: ModulePass) -> ModulePass:
        if target is not None and isinstance(p, FusePass) and p.target is None:
            return replace(p, target=target)
        if p.name == "tile-gemm":
            # by name: shared modules import no target (tests/architecture/test_architecture.py)
            tiling: Any = p
            if sms and not tiling.sms:
                tiling = replace(tiling, sms=sms)
            if tuned and not tiling.tuned:
                tiling = replace(tiling, tuned=True)
            return tiling
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
