"""What ``fusec run`` does besides parsing arguments: inputs, outputs, ``--check`` (``run``).

Inputs come from an ``.npz`` file (arrays named after the entry function's
arguments, or ``arr_0``, ``arr_1``, ... as ``np.savez(*arrays)`` writes them)
or are drawn at random. ``--check`` compares every result against the float64
reference executor run on the IR as parsed (before any pass), so it checks
fusion and code generation together.

Where 16-bit values are rounded depends on the fusion: inside one fused
kernel 16-bit intermediates stay float32 and only the IR's ``ai.cast`` ops
round, while a value that crosses from one kernel to the next (an unfused op
boundary) is stored in its declared type, so rounded; a group that a target
runs op by op (the cuda target's PyTorch fallback) rounds after every op.
Neither placement is more correct than another, and a fixed reference would
make the verdict depend on the fusion plan (a bf16 matmul + softmax passed
when the softmax was fused and failed when it was not). So ``--check`` makes
two comparisons, and passes a result only when both hold:

* ``program``: the result against the float64 reference run on the compiled
  IR with the program's own rounding points (``rounding="groups"``: casts and
  group results; every op in op-by-op groups; every op on the ``reference``
  target), elementwise like ``numpy.allclose`` (rtol, and atol scaled to the
  reference's RMS) at the tolerance of the lowest precision the value passed
  through (an f32 result computed from f16 values gets the f16 tolerance:
  float32 and float64 arithmetic can round a 16-bit value differently);
* ``pipeline``: the compiled IR against the IR as parsed, both in exact
  float64 (no rounding), at 1e-9: the passes (fusion included) preserved the
  maths. Constants the passes compute (a BatchNorm folded into the conv's weights
  and bias) are stored in their element type, so when the compiled IR holds float
  constants the tolerance is a few units of the least precise one's rounding
  (``pipeline_tolerance``) instead.

The relative L2 errors are printed as information.
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

if TYPE_CHECKING:
    from fusec.api import CompiledModule
    from fusec.tools.timing import Timing

from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.memory import check_bytes, tensor_bytes
from fusec.ir.module import entry_function, precision_of

#: Tolerance by element type: rtol, and atol per unit of the reference's RMS (integers
#: and bools exactly).
TOLERANCE = {
    "f32": 1e-4,
    "f16": 1e-2,
    "bf16": 1e-2,
    **dict.fromkeys(("i64", "i32", "i1", "i8", "ui8", "i4", "ui4", "f8E4M3FN", "f8E5M2"), 0.0),
}
#: The f32 tolerance of a program compiled with ``precision="tf32"`` for the cuda target:
#: tf32 keeps 10 mantissa bits, as f16 does.
TF32_TOLERANCE = 1e-2
#: Element types from the most precise to the least (bf16 keeps 8 significant bits;
#: integers are exact, so an f32 result computed from them keeps the f32 tolerance, and
#: so are quantized values: ai.quantize's rounding is part of the maths, in the reference).
PRECISION_ORDER = (
    *("i1", "i4", "ui4", "i8", "ui8", "f8E4M3FN", "f8E5M2", "i32", "i64"),
    *("f32", "f16", "bf16"),
)

#: Tolerance of the ``pipeline`` comparison: float64 maths before and after the passes.
PIPELINE_TOLERANCE = 1e-9
#: Units of rounding of a float constant the passes may have computed (a folded
#: BatchNorm: a scale, a product and a sum per weight, each rounded once).
FOLDED_CONSTANT_ULPS = 8
#: Unit roundoff by float element type.
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}


def pipeline_tolerance(compiled: ModuleOp) -> float:
    """The ``pipeline`` comparison's tolerance for ``compiled``: ``PIPELINE_TOLERANCE``, or
    ``FOLDED_CONSTANT_ULPS`` units of the least precise float constant's rounding."""
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import TensorType

    tolerance = PIPELINE_TOLERANCE
    for op in compiled.walk():
        if isinstance(op, arith.ConstantOp) and isinstance(op.result.type, TensorType):
            dtype = spec_of(op.result.type).dtype
            if dtype in UNIT_ROUNDOFF:
                tolerance = max(tolerance, FOLDED_CONSTANT_ULPS * UNIT_ROUNDOFF[dtype])
    return tolerance


def argument_names(fn: func.FuncOp) -> list[str]:
    """The entry's argument names as written (``%x`` -> ``x``), ``arg<i>`` when unnamed."""
    return [a.name_hint or f"arg{i}" for i, a in enumerate(fn.body.block.args)]


def random_inputs(fn: func.FuncOp, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal arrays of the entry's float argument types (never zeros); integers
    uniform in [0, 4) (valid indices of any table of 4 rows or more: token ids, masks)
    and fair-coin bools for the integer and bool ones."""
    if seed < 0:
        raise FusecError(f"the seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    specs = [spec_of(p) for p in fn.function_type.inputs.data]
    check_bytes(tensor_bytes([s.shape for s in specs], 8), "random inputs")  # drawn in float64
    arrays = []
    for param in fn.function_type.inputs.data:
        spec = spec_of(param)
        try:
            if spec.dtype == "i1":
                arrays.append(np.asarray(rng.random(spec.shape) < 0.5))
                continue
            if spec.dtype in ("i64", "i32"):
                arrays.append(rng.integers(0, 4, spec.shape).astype(numpy_dtype(spec.dtype)))
                continue
            if spec.dtype in ("i8", "ui8", "i4", "ui4"):  # codes over most of the range
                low, span = {"i8": (-100, 200), "ui8": (0, 200), "i4": (-8, 16)}.get(
                    spec.dtype, (0, 16)
                )
                codes = rng.integers(low, low + span, spec.shape)
                arrays.append(codes.astype(numpy_dtype(spec.dtype)))
                continue
            if spec.dtype in ("f8E4M3FN", "f8E5M2"):  # float8 codes over several binades
                values = rng.standard_normal(spec.shape) * 16
                arrays.append(values.astype(numpy_dtype(spec.dtype)))
                continue
            arrays.append(rng.standard_normal(spec.shape).astype(numpy_dtype(spec.dtype)))
        except MemoryError:
            raise FusecError(f"not enough memory for a random {spec}") from None
    return arrays


#: The first bytes of a zip archive (an .npz; an empty one starts with its end
#: record) and of a single-array .npy file.
_ZIP_MAGIC, _NPY_MAGIC = (b"PK\x03\x04", b"PK\x05\x06"), b"\x93NUMPY"


def load_inputs(fn: func.FuncOp, path: str | Path) -> list[np.ndarray]:
    """The entry's arguments from an .npz file, each of its declared element type, as
    calling a compiled module takes them (a float64 array is refused, not rounded
    behind the caller's back); npz has no bfloat16, so a bf16 argument is given as
    float32 and rounded.

    Each array's header (shape, dtype) is checked against its argument before
    its data is read: a member that is not wanted, or whose header does not
    match, is never decompressed (a small file cannot make us allocate much).
    """
    with _open_npz(path) as archive:
        stored, keys = _npz_keys(archive, path, argument_names(fn))
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


def npz_argument_shapes(path: str | Path, names: Sequence[str]) -> list[tuple[int, ...]]:
    """The shapes of the arguments ``names`` (or ``arr_0``, ``arr_1``, ...) in an .npz
    file, read from the arrays' headers (no data is read): what a model with dynamic
    dimensions is specialized for; ``load_inputs`` reads the arrays after."""
    with _open_npz(path) as archive:
        _, keys = _npz_keys(archive, path, names)
        return [_header(archive, path, key)[0] for key in keys]


def _npz_keys(
    archive: zipfile.ZipFile, path: str | Path, names: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(the arrays an .npz file holds, the keys of ``names`` among them: the names
    themselves or ``arr_0``, ``arr_1``, ...), or a FusecError saying what it holds."""
    stored = [name.removesuffix(".npy") for name in archive.namelist()]
    if all(n in stored for n in names):
        return stored, list(names)
    if all(f"arr_{i}" in stored for i in range(len(names))):
        return stored, [f"arr_{i}" for i in range(len(names))]
    raise FusecError(
        f"{path}: expected arrays named {', '.join(names)} (or arr_0 ... "
        f"arr_{len(names) - 1}), found {', '.join(stored) or 'none'}"
    )


def _header(archive: zipfile.ZipFile, path: str | Path, key: str) -> tuple[tuple[int, ...], Any]:
    """(shape, dtype) of member ``key`` from its .npy header."""
    try:
        with archive.open(f"{key}.npy") as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(member)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    except Exception as err:  # BadZipFile, a truncated member, a bad header, ...
        raise FusecError(f"{path}: not a readable .npz file ({err})") from None
    return tuple(int(d) for d in shape), dtype


def _load_member(archive: zipfile.ZipFile, path: str | Path, key: str, spec) -> np.ndarray:
    """One argument: header checked first, then read and converted to ``spec``'s type."""
    shape, dtype = _header(archive, path, key)
    if shape != spec.shape:
        raise FusecError(f"{path}: array '{key}' has shape {shape}, expected {spec}")
    want = np.dtype(numpy_dtype(spec.dtype))
    stored_as = np.dtype(np.float32) if spec.dtype == "bf16" else want
    if dtype != stored_as:
        bf16 = " (npz has no bfloat16: give float32)" if spec.dtype == "bf16" else ""
        raise FusecError(
            f"{path}: array '{key}' has dtype {dtype}, expected {stored_as} for {spec}{bf16}"
        )
    try:
        with archive.open(f"{key}.npy") as member:
            array = np.lib.format.read_array(member, allow_pickle=False)
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
    arrays: dict[str, Any] = {}
    for i, out in enumerate(outputs):
        arrays[f"result{i}"] = out if out.dtype.kind == "f" else out.astype(np.float32)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def lowest_precisions(fn: func.FuncOp) -> list[str]:
    """Per result of ``fn``, the least precise element type its value passed through.

    A result computed from 16-bit values is held to the 16-bit tolerance even when it
    is f32: it cannot be more exact than they were.
    """
    rank = {dtype: k for k, dtype in enumerate(PRECISION_ORDER)}
    lowest: dict[SSAValue, str] = {a: spec_of(a.type).dtype for a in fn.body.block.args}

    def least(values, own: str) -> str:
        seen = [lowest.get(v, spec_of(v.type).dtype) for v in values]
        return max([own, *seen], key=rank.__getitem__)

    for op in fn.body.block.ops:
        for result in op.results:  # (an ai.fused group: its results, from all its operands)
            lowest[result] = least(op.operands, spec_of(result.type).dtype)
    ret = fn.body.block.last_op
    assert ret is not None  # a verified function ends in its return
    return [least([v], spec_of(v.type).dtype) for v in ret.operands]


@dataclass(frozen=True)
class Check:
    """One result compared with one or more references.

    ``errors`` holds, per comparison, (its name, its tolerance, the worst
    element's error as a fraction of what the tolerance allows there, the
    relative L2 error). ``dtype`` is the lowest precision the value passed
    through. The result passes when it has no NaN and every comparison holds.
    """

    index: int
    spec: str
    dtype: str
    errors: tuple[tuple[str, float, float, float], ...]
    has_nan: bool

    @property
    def passed(self) -> bool:
        return not self.has_nan and all(worst <= 1.0 for _, _, worst, _ in self.errors)

    def format(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        nan = " (NaN in the result)" if self.has_nan else ""
        parts = "; ".join(
            f"{name}: worst element at {worst:.3g} of the tolerance {tol:.0e} (rel L2 {l2:.2e})"
            for name, tol, worst, l2 in self.errors
        )
        return f"result #{self.index} {self.spec} (via {self.dtype}): {parts} {verdict}{nan}"


def elementwise_error(out: np.ndarray, ref: np.ndarray, tolerance: float) -> tuple[float, float]:
    """(worst |out - ref| / (atol + rtol |ref|), relative L2 error), numpy.allclose-style
    with rtol = tolerance and atol = tolerance x RMS of the finite reference values.
    Equal values (infinities included) have no error; NaN makes the worst infinite."""
    got = np.asarray(out).astype(np.float64)
    want = np.asarray(ref, dtype=np.float64)
    finite = want[np.isfinite(want)]
    rms = float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0
    allowed = tolerance * (rms if rms > 0 else 1.0) + tolerance * np.abs(want)
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.where(got == want, 0.0, np.abs(got - want))
        ratio = np.where(diff == 0, 0.0, diff / allowed)  # exact types: allowed is 0
    worst = float(np.max(np.nan_to_num(ratio, nan=np.inf))) if ratio.size else 0.0
    norm = np.linalg.norm(finite)
    l2 = float(np.linalg.norm(np.nan_to_num(diff, nan=np.inf)) / (norm if norm > 0 else 1.0))
    return worst, l2


def compare(
    fn: func.FuncOp,
    outputs: Sequence[np.ndarray],
    *references: tuple[str, Sequence[np.ndarray]],
    tf32: bool = False,
) -> list[Check]:
    """Each result of ``fn`` against the named ``references`` (name, results), elementwise,
    at the tolerance of the lowest precision its value passed through (f32 at
    ``TF32_TOLERANCE`` with ``tf32``: the program ran f32 maths in tf32)."""
    checks = []
    dtypes = lowest_precisions(fn)
    specs = [spec_of(t) for t in fn.function_type.outputs.data]
    for i, (out, spec, dtype) in enumerate(zip(outputs, specs, dtypes, strict=True)):
        tol = TF32_TOLERANCE if tf32 and dtype == "f32" else TOLERANCE[dtype]
        errors = tuple(
            (name, tol, *elementwise_error(out, refs[i], tol)) for name, refs in references
        )
        has_nan = bool(np.isnan(np.asarray(out).astype(np.float64)).any())
        checks.append(Check(i, str(spec), dtype, errors, has_nan))
    return checks


def check(
    parsed: ModuleOp,
    compiled: CompiledModule,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
) -> list[Check]:
    """``--check``: ``outputs`` of ``compiled`` (run on ``inputs``) against the float64
    reference with the program's own rounding points, and the compiled IR against the IR
    as ``parsed``; see the module docstring."""
    from fusec.runtime.reference import run_reference

    entry = compiled.entry
    op_by_op: tuple[int, ...] = ()
    if compiled.target == "reference":  # runs every op in its declared type
        rounding = "every-op"
    else:
        rounding, op_by_op = "groups", op_by_op_groups(compiled)
    program = run_reference(
        compiled.module, inputs, entry=entry, rounding=rounding, op_by_op_groups=op_by_op
    )
    exact = run_reference(compiled.module, inputs, entry=entry)
    original = run_reference(parsed, inputs, entry=entry)
    tf32 = compiled.target == "cuda" and precision_of(compiled.module) == "tf32"
    checks = compare(entry_function(parsed, entry), outputs, ("program", program), tf32=tf32)
    result = []
    tolerance = pipeline_tolerance(compiled.module)
    for c, new, old in zip(checks, exact, original, strict=True):
        worst, l2 = elementwise_error(new, old, tolerance)
        pipeline = ("pipeline", tolerance, worst, l2)
        result.append(Check(c.index, c.spec, c.dtype, (*c.errors, pipeline), c.has_nan))
    return result


def op_by_op_groups(compiled: CompiledModule) -> tuple[int, ...]:
    """Indices of the compiled groups that run op by op (the cuda PyTorch fallback)."""
    return tuple(k for k, kernel in enumerate(compiled.kernels) if kernel.runs_op_by_op)


def summary(index: int, out: np.ndarray) -> str:
    """A one-line description of a result for the terminal: min, max and mean of its
    finite values, and how many are NaN or infinite (one NaN made all three NaN)."""
    data = np.asarray(out).astype(np.float64)
    shape = "x".join(str(d) for d in data.shape) or "scalar"
    if data.size == 0:
        return f"result #{index}: {shape} (empty)"
    finite = data[np.isfinite(data)]
    head = f"result #{index}: {shape} {out.dtype}: "
    nan, inf = int(np.isnan(data).sum()), int(np.isinf(data).sum())
    if not finite.size:
        return head + f"no finite value; {nan} NaN, {inf} inf"
    stats = f"min {finite.min():.6g} max {finite.max():.6g} mean {finite.mean():.6g}"
    if nan or inf:
        stats += f" of {finite.size} finite; {nan} NaN, {inf} inf"
    return head + stats


@dataclass
class RunResult:
    """One ``fusec run``: where it ran, the results, and their checks (``check=True``)."""

    entry: str
    target: str
    outputs: list[np.ndarray]
    checks: list[Check] | None = None

    @property
    def passed(self) -> bool:
        return self.checks is None or all(c.passed for c in self.checks)

    def lines(self) -> list[str]:
        lines = [f"ran @{self.entry} on target '{self.target}'"]
        lines += [summary(i, out) for i, out in enumerate(self.outputs)]
        lines += [c.format() for c in self.checks or ()]
        return lines


def run(
    source: str | ModuleOp,
    *,
    target: str = "auto",
    pipeline: str | None = None,
    entry: str | None = None,
    inputs: str | Path | None = None,
    seed: int | None = None,
    check_results: bool = False,
    timing: Timing | None = None,
    precision: str = "ieee",
) -> RunResult:
    """Compile ``source`` (a path, IR text or module) and run it on the arrays of the
    ``.npz`` file ``inputs`` or, with ``seed``, on random ones; ``check_results``
    compares every result as ``--check`` does (see the module docstring). ``timing``
    (``--timing``) gets the compile's phases and the first call. ``precision``: as
    ``fusec.compile``'s (f32 results of a tf32 cuda program are checked at 1e-2)."""
    from fusec.api import compile as fusec_compile
    from fusec.api import parse

    if (inputs is None) == (seed is None):
        raise FusecError("give exactly one of --inputs FILE.npz and --random-inputs")
    compiled = fusec_compile(
        source, target=target, pipeline=pipeline, entry=entry, precision=precision
    )
    if timing is not None:
        timing.add_compile(compiled.phases, compiled.timings)
    fn = entry_function(compiled.module, compiled.entry)
    arrays = random_inputs(fn, seed) if seed is not None else load_inputs(fn, inputs or "")
    with timing.phase("first call") if timing is not None else contextlib.nullcontext():
        result = compiled(*arrays)
    outputs = list(result) if isinstance(result, tuple) else [result]
    checks = None
    if check_results:
        parsed = source if isinstance(source, ModuleOp) else parse(source)
        checks = check(parsed, compiled, arrays, outputs)
    return RunResult(compiled.entry, compiled.target, outputs, checks)
