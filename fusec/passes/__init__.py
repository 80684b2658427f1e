"""Passes and pipelines over ai IR.

``available_passes()`` maps kebab-case names to pass classes (ours and the xDSL
passes we reuse); ``build_pipeline(spec)`` turns an xDSL pass-pipeline spec
(``infer-shapes,canonicalize``) into a ``PassPipeline``. Named pipelines such
as ``fusec-default`` expand in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from xdsl.passes import ModulePass, PassPipeline

PIPELINES: dict[str, str] = {
    "fusec-default": "infer-shapes,canonicalize,cse,fuse-attention,"
    "fuse-prologue,fuse-epilogue,fuse-reduction,fuse-elementwise,fuse-singletons",
}


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def infer_shapes():
        from fusec.passes.infer_shapes import InferShapesPass

        return InferShapesPass

    def canonicalize():
        from xdsl.transforms.canonicalize import CanonicalizePass

        return CanonicalizePass

    def cse():
        from xdsl.transforms.common_subexpression_elimination import (
            CommonSubexpressionElimination,
        )

        return CommonSubexpressionElimination

    def dce():
        from xdsl.transforms.dead_code_elimination import DeadCodeElimination

        return DeadCodeElimination

    def fusion_pass(module: str, cls: str) -> Callable[[], type[ModulePass]]:
        def load() -> type[ModulePass]:
            import importlib

            return getattr(importlib.import_module(module), cls)

        return load

    from fusec.passes.fusion import FUSION_PASSES

    return {
        "infer-shapes": infer_shapes,
        "canonicalize": canonicalize,
        "cse": cse,
        "dce": dce,
        **{name: fusion_pass(*where) for name, where in FUSION_PASSES.items()},
        "fuse-attention": fusion_pass("fusec.passes.fusion.fuse_attention", "FuseAttentionPass"),
    }


def expand_spec(spec: str) -> str:
    """Replace named pipelines (``fusec-default``) by their passes."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    return ",".join(PIPELINES.get(p, p) for p in parts)


def build_pipeline(
    spec: str | None = None, callback=None, target: str | None = None
) -> PassPipeline:
    """A PassPipeline from an xDSL pipeline spec; ``None`` means ``fusec-default``.

    ``target`` becomes the ``target`` option of every fusion pass that does not
    name one itself: the groups are then planned for that back end.
    """
    pipeline = _parse_pipeline(spec, callback)
    if target is None:
        return pipeline
    from fusec.passes.fusion.driver import FusionPass

    passes = tuple(
        replace(p, target=target) if isinstance(p, FusionPass) and p.target is None else p
        for p in pipeline.passes
    )
    return PassPipeline(passes, pipeline.callback)


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
