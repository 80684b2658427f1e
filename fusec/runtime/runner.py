"""What ``fusec run`` does besides parsing arguments: inputs, outputs, ``--check``.

Inputs come from an ``.npz`` file (arrays named after the entry function's
arguments, or ``arr_0``, ``arr_1``, ... as ``np.savez(*arrays)`` writes them)
or are drawn at random. ``--check`` compares every result against the float64
reference executor run on the IR as parsed (before any pass), so it checks
fusion and code generation together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xdsl.dialects import func

from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.runtime.dtypes import numpy_dtype

#: Relative-error tolerance of a result, by element type.
TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2}


def argument_names(fn: func.FuncOp) -> list[str]:
    """The entry's argument names as written (``%x`` -> ``x``), ``arg<i>`` when unnamed."""
    return [a.name_hint or f"arg{i}" for i, a in enumerate(fn.body.block.args)]


def random_inputs(fn: func.FuncOp, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal arrays of the entry's argument types (never zeros)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in fn.function_type.inputs.data:
        spec = spec_of(param)
        arrays.append(rng.standard_normal(spec.shape).astype(numpy_dtype(spec.dtype)))
    return arrays


def load_inputs(fn: func.FuncOp, path: str | Path) -> list[np.ndarray]:
    """The entry's arguments from an .npz file, converted to the declared element types."""
    try:
        with np.load(path, allow_pickle=False) as data:
            stored = {key: data[key] for key in data.files}
    except FileNotFoundError:
        raise FusecError(f"{path}: no such file") from None
    except (OSError, ValueError) as err:
        raise FusecError(f"{path}: not a readable .npz file ({err})") from None
    names = argument_names(fn)
    if all(n in stored for n in names):
        keys = names
    elif all(f"arr_{i}" in stored for i in range(len(names))):
        keys = [f"arr_{i}" for i in range(len(names))]
    else:
        raise FusecError(
            f"{path}: expected arrays named {', '.join(names)} (or arr_0 ... arr_{len(names) - 1}),"
            f" found {', '.join(stored) or 'none'}"
        )
    arrays = []
    for key, param in zip(keys, fn.function_type.inputs.data, strict=True):
        spec = spec_of(param)
        array = stored[key]
        if array.shape != spec.shape:
            raise FusecError(f"{path}: array '{key}' has shape {array.shape}, expected {spec}")
        if array.dtype.kind not in "fiu":
            raise FusecError(f"{path}: array '{key}' has dtype {array.dtype}, expected {spec}")
        arrays.append(array.astype(numpy_dtype(spec.dtype)))
    return arrays


def save_outputs(path: str | Path, outputs: Sequence[np.ndarray]) -> None:
    """Results as ``result0``, ``result1``, ... (bf16 stored as float32: npz has no bf16)."""
    arrays = {}
    for i, out in enumerate(outputs):
        arrays[f"result{i}"] = out if out.dtype.kind == "f" else out.astype(np.float32)
    np.savez(path, **arrays)


@dataclass(frozen=True)
class Check:
    """One result compared with the reference."""

    index: int
    spec: str
    rel_err: float
    tolerance: float
    has_nan: bool

    @property
    def passed(self) -> bool:
        return not self.has_nan and self.rel_err <= self.tolerance

    def format(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        nan = " (NaN in the result)" if self.has_nan else ""
        return (
            f"result #{self.index} {self.spec}: rel err {self.rel_err:.3e} "
            f"(tol {self.tolerance:.0e}) {verdict}{nan}"
        )


def compare(
    fn: func.FuncOp, outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]
) -> list[Check]:
    """||out - ref|| / ||ref|| per result; NaN anywhere in a result never passes."""
    checks = []
    for i, (out, ref, rtype) in enumerate(
        zip(outputs, references, fn.function_type.outputs.data, strict=True)
    ):
        spec = spec_of(rtype)
        got = np.asarray(out).astype(np.float64)
        want = np.asarray(ref, dtype=np.float64)
        has_nan = bool(np.isnan(got).any())
        denom = np.linalg.norm(want)
        err = float(np.linalg.norm(got - want) / (denom if denom > 0 else 1.0))
        if np.isnan(err):
            err = float("inf")
        checks.append(Check(i, str(spec), err, TOLERANCE[spec.dtype], has_nan))
    return checks


def summary(index: int, out: np.ndarray) -> str:
    """A one-line description of a result for the terminal."""
    data = np.asarray(out).astype(np.float64)
    shape = "x".join(str(d) for d in data.shape) or "scalar"
    if data.size == 0:
        return f"result #{index}: {shape} (empty)"
    return (
        f"result #{index}: {shape} {out.dtype}: min {data.min():.6g} max {data.max():.6g} "
        f"mean {data.mean():.6g}"
    )
