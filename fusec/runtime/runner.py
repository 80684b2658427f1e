"""What ``fusec run`` does besides parsing arguments: inputs, outputs, ``--check``.

Inputs come from an ``.npz`` file (arrays named after the entry function's
arguments, or ``arr_0``, ``arr_1``, ... as ``np.savez(*arrays)`` writes them)
or are drawn at random. ``--check`` compares every result against the float64
reference executor run on the IR as parsed (before any pass), so it checks
fusion and code generation together.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xdsl.dialects import func

from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.runtime.dtypes import numpy_dtype
from fusec.runtime.memory import check_bytes, tensor_bytes

#: Relative-error tolerance of a result, by element type.
TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2}


def argument_names(fn: func.FuncOp) -> list[str]:
    """The entry's argument names as written (``%x`` -> ``x``), ``arg<i>`` when unnamed."""
    return [a.name_hint or f"arg{i}" for i, a in enumerate(fn.body.block.args)]


def random_inputs(fn: func.FuncOp, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal arrays of the entry's argument types (never zeros)."""
    if seed < 0:
        raise FusecError(f"the seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    specs = [spec_of(p) for p in fn.function_type.inputs.data]
    check_bytes(tensor_bytes([s.shape for s in specs], 8), "random inputs")  # drawn in float64
    arrays = []
    for param in fn.function_type.inputs.data:
        spec = spec_of(param)
        try:
            arrays.append(rng.standard_normal(spec.shape).astype(numpy_dtype(spec.dtype)))
        except MemoryError:
            raise FusecError(f"not enough memory for a random {spec}") from None
    return arrays


#: The first bytes of a zip archive (an .npz; an empty one starts with its end
#: record) and of a single-array .npy file.
_ZIP_MAGIC, _NPY_MAGIC = (b"PK\x03\x04", b"PK\x05\x06"), b"\x93NUMPY"


def load_inputs(fn: func.FuncOp, path: str | Path) -> list[np.ndarray]:
    """The entry's arguments from an .npz file, converted to the declared element types.

    Each array's header (shape, dtype) is checked against its argument before
    its data is read: a member that is not wanted, or whose header does not
    match, is never decompressed (a small file cannot make us allocate much).
    """
    with _open_npz(path) as archive:
        stored = [name.removesuffix(".npy") for name in archive.namelist()]
        names = argument_names(fn)
        if all(n in stored for n in names):
            keys = names
        elif all(f"arr_{i}" in stored for i in range(len(names))):
            keys = [f"arr_{i}" for i in range(len(names))]
        else:
            raise FusecError(
                f"{path}: expected arrays named {', '.join(names)} (or arr_0 ... "
                f"arr_{len(names) - 1}), found {', '.join(stored) or 'none'}"
            )
        extra = [key for key in stored if key not in keys]
        if extra:  # most likely a misspelt name or a file for another function
            raise FusecError(
                f"{path}: unexpected array(s) {', '.join(extra)}: @{fn.sym_name.data} takes "
                f"{', '.join(keys) or 'no arguments'}"
            )
        return [
            _load_member(archive, path, key, spec_of(param))
            for key, param in zip(keys, fn.function_type.inputs.data, strict=True)
        ]


def _load_member(archive: zipfile.ZipFile, path: str | Path, key: str, spec) -> np.ndarray:
    """One argument: header checked first, then read and converted to ``spec``'s type."""
    try:
        with archive.open(f"{key}.npy") as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(member)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(member)
            if tuple(shape) != spec.shape:
                raise FusecError(f"{path}: array '{key}' has shape {tuple(shape)}, expected {spec}")
            if dtype.kind not in "fiu":
                raise FusecError(f"{path}: array '{key}' has dtype {dtype}, expected {spec}")
        with archive.open(f"{key}.npy") as member:
            array = np.lib.format.read_array(member, allow_pickle=False)
    except FusecError:
        raise
    except Exception as err:  # BadZipFile, a truncated member, a bad header, ...
        raise FusecError(f"{path}: not a readable .npz file ({err})") from None
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.astype(numpy_dtype(spec.dtype))
        overflow = np.isfinite(array) & ~np.isfinite(converted)
    if overflow.any():
        raise FusecError(
            f"{path}: array '{key}' has values outside the range of {spec.dtype} "
            f"(e.g. {array[overflow].flat[0]}), expected {spec}"
        )
    return converted


def _open_npz(path: str | Path) -> zipfile.ZipFile:
    """The .npz archive at ``path``, or a FusecError saying what the file is instead."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(6)
    except FileNotFoundError:
        raise FusecError(f"{path}: no such file") from None
    except OSError as err:
        raise FusecError(f"{path}: cannot read the file ({err.strerror or err})") from None
    if magic.startswith(_NPY_MAGIC):
        raise FusecError(f"{path}: a .npy file holds one array; give an .npz (numpy.savez)")
    if not magic.startswith(_ZIP_MAGIC):
        raise FusecError(f"{path}: not an .npz file (numpy.savez writes one)")
    try:
        archive = zipfile.ZipFile(path)
    except Exception as err:  # BadZipFile, a truncated central directory, ...
        raise FusecError(f"{path}: not a readable .npz file ({err})") from None
    bad = [n for n in archive.namelist() if not n.endswith(".npy")]
    if bad:
        archive.close()
        raise FusecError(f"{path}: not an .npz file (member {bad[0]!r} is not an array)")
    return archive


def outputs_npz(outputs: Sequence[np.ndarray]) -> bytes:
    """Results as an .npz archive: ``result0``, ``result1``, ... (bf16 as float32)."""
    arrays = {}
    for i, out in enumerate(outputs):
        arrays[f"result{i}"] = out if out.dtype.kind == "f" else out.astype(np.float32)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def save_outputs(path: str | Path, outputs: Sequence[np.ndarray]) -> None:
    """Results as ``result0``, ``result1``, ... at exactly ``path`` (npz has no bf16)."""
    Path(path).write_bytes(outputs_npz(outputs))


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
        # Equal infinities agree (inf - inf would be NaN); an infinity on one side only
        # stays an infinite error. The scale is that of the reference's finite values.
        with np.errstate(invalid="ignore"):
            diff = np.where(got == want, 0.0, got - want)
        denom = np.linalg.norm(want[np.isfinite(want)])
        err = float(np.linalg.norm(diff) / (denom if denom > 0 else 1.0))
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
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf in the mean is NaN
        low, high, mean = data.min(), data.max(), data.mean()
    return f"result #{index}: {shape} {out.dtype}: min {low:.6g} max {high:.6g} mean {mean:.6g}"
