"""Device helpers of the W4A16 route's Tensor Core kernel (``gemm/w4_mma.py``, issue 31),
given to generated kernels through ``fusec.targets.cuda.abi``:

* ``w4_mma_<f16|bf16>x<1|2>(word, b..., tmp, sx, d)``: one packed word of eight 4-bit
  codes (``constant_layouts.pack_int4_mma``: a lane's A fragment of a 16 x 16 tile) as the
  16-bit floats ``MAGIC + q`` in registers, then per B fragment (``b...``: 2 (x1) or 4 (x2)
  int32 words of the activations' pairs) one ``mma.sync.m16n8k16`` with f32 accumulation
  of ``(MAGIC + q) x`` into ``tmp[d:d + 4]`` (``tmp[d + 4:d + 8]`` for the second) and one
  of an all-ones A into ``sx``: the sums of x over K, each lane's for its fragment's rows;
* ``w4_mmaq_<f16|bf16>x<1|2>(word, b..., tmp, d)``: the same without ``sx`` (a kernel that
  has x's sums from elsewhere: ``w4_mma.SHARED_X_SUMS``).

Why raw codes: the dequantized value ``(q - z) s`` costs a packed subtract and multiply a
pair of codes (Marlin's way, Frantar et al., 2024), and this kernel is issue-bound. Over a
chunk of K within one scale block, ``sum (q - z) s x = s (sum (MAGIC + q) x - (MAGIC + z)
sum x)``: the kernel applies the scale and zero point once a chunk to the two
accumulators, in f32. A 4-bit field ORed into the mantissa of a 16-bit float whose ulp is
1 (f16 1024, bf16 128) gives ``MAGIC + q`` exactly, so a code costs a ``LOP3`` (and a
shift a pair of fields) and the Tensor Cores do the rest. The products ``(MAGIC + q) x``
are exact in f32; the sums carry ``MAGIC`` times x's sum, which the correction removes:
a float32 model of the sums puts the error at ~2e-5 relative (f16's 1024, activations all
positive: x's sum does not cancel; bf16's 128: ~1e-6), where the weight's own rounding to
16 bits, which the reference makes, is up to 2e-3 a weight (bf16). The pairs of fields a
word gives are (0, 4), (1, 5), (2, 6), (3, 7), each shifted down to bits 0-3 / 16-19: the
fragment's registers a0a1, a2a3, a4a5, a6a7.

Under Numba's CUDA simulator the same names are plain Python with the same meaning; the
warp-wide ``mma`` meets its 32 lanes on a barrier of the warp's own (not the block's: a
producer warp that never calls it may wait on the block's barrier meanwhile), so every lane
of a warp must call it the same number of times (the kernel's loops are uniform).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from fusec.targets.cuda.env import simulator_enabled
from fusec.targets.cuda.rawmove import as_i32, pointer

FORMATS = ("f16", "bf16")
#: B fragments an ``mma`` helper multiplies (8 rows of activations each).
FRAGMENTS = (1, 2)
#: ``| MAGIC[fmt]``: the 16-bit float (both halves) whose ulp is 1 (f16 1024, bf16 128).
MAGIC = {"f16": 0x64006400, "bf16": 0x43004300}


def helper_names() -> list[str]:
    """The names this module gives generated kernels (through ``fusec.targets.cuda.abi``)."""
    return [f"w4_mma{q}_{f}x{n}" for q in ("", "q") for f in FORMATS for n in FRAGMENTS]


# ----------------------------------------------------------------------- simulator


def _halves(fmt: str, word: int) -> tuple[float, float]:
    import ml_dtypes

    dtype = np.float16 if fmt == "f16" else ml_dtypes.bfloat16
    bits = np.array([word & 0xFFFF, (word >> 16) & 0xFFFF], dtype=np.uint16)
    return tuple(float(v) for v in bits.view(dtype))  # type: ignore[return-value]


def _round(fmt: str, value: float) -> float:
    import ml_dtypes

    dtype = np.float16 if fmt == "f16" else ml_dtypes.bfloat16
    return float(np.array([value], dtype=np.float32).astype(dtype)[0])


def sim_fragment(fmt: str, word: int) -> list[float]:
    """A lane's A fragment (a0..a7, values ``MAGIC + q``) from its packed word: the GPU
    helper's fields."""
    w = int(word) & 0xFFFFFFFF
    fields = [((w >> (4 * i)) & 0x000F000F) | MAGIC[fmt] for i in range(4)]
    return [v for field in fields for v in _halves(fmt, field)]


_SIM_LOCK = threading.Lock()
#: Seconds a simulated lane waits for the rest of its warp before the kernel fails.
_SIM_TIMEOUT = 120


def _warp_state(thread: Any) -> tuple[dict, threading.Barrier]:
    """The simulated block's fragment slots (a thread's id a key) and the barrier of the
    calling thread's warp (blocks run one after another: the manager's state serves each)."""
    manager = thread._manager
    with _SIM_LOCK:
        state: tuple[dict, dict[int, threading.Barrier]] | None = getattr(
            manager, "_fusec_mma_state", None
        )
        if state is None:
            state = manager._fusec_mma_state = ({}, {})
        slots, barriers = state
        warp = thread.thread_id // 32
        if warp not in barriers:
            barriers[warp] = threading.Barrier(32, timeout=_SIM_TIMEOUT)
    return slots, barriers[warp]


def _sim_mma(fmt: str, count: int, sums: bool = True) -> Any:
    def mma(word: Any, *rest: Any) -> None:
        regs, tmp = rest[: 2 * count], rest[2 * count]
        sx = rest[2 * count + 1] if sums else None
        d = int(rest[-1])
        thread: Any = threading.current_thread()  # (the simulator's block thread)
        tid = thread.thread_id
        a = sim_fragment(fmt, int(word))
        b = [v for r in regs for v in _halves(fmt, int(r) & 0xFFFFFFFF)]
        slots, warp = _warp_state(thread)
        slots[tid] = (a, b)
        warp.wait()  # every lane's fragments are in
        base = tid - tid % 32
        lanes = [slots[base + lane] for lane in range(32)]
        warp.wait()  # (read before any lane's next call writes its slot)
        tile = np.zeros((16, 16))
        cols = np.zeros((count, 16, 8))
        for lane, (fa, fb) in enumerate(lanes):
            g, t = lane // 4, lane % 4
            for i, (r, k) in enumerate(
                [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
                 (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
            ):  # fmt: skip
                tile[r, k] = fa[i]
            for j in range(count):
                for i, k in enumerate((2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)):
                    cols[j, k, g] = fb[4 * j + i]
        g, t = (tid % 32) // 4, tid % 4
        for j in range(count):
            product, col_sums = tile @ cols[j], cols[j].sum(axis=0)
            outputs = ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1))
            for i, (r, c) in enumerate(outputs):
                tmp[d + 4 * j + i] = np.float32(float(tmp[d + 4 * j + i]) + product[r, c])
                if sx is not None:
                    sx[d + 4 * j + i] = np.float32(float(sx[d + 4 * j + i]) + col_sums[c])

    return mma


def _by_name(make: Callable[[str, int, bool], Any]) -> dict[str, Any]:
    """Every helper by its name (``helper_names``), made by ``make(fmt, count, sums)``."""
    return {
        f"w4_mma{'' if sums else 'q'}_{fmt}x{count}": make(fmt, count, sums)
        for sums in (True, False)
        for fmt in FORMATS
        for count in FRAGMENTS
    }


def _make_sim() -> dict[str, Any]:
    return _by_name(_sim_mma)


# --------------------------------------------------------------------------- GPU


#: 1.0 in both halves: the all-ones A fragment whose product with B is x's sums.
ONES = {"f16": 0x3C003C00, "bf16": 0x3F803F80}


def mma_asm(fmt: str, count: int, sums: bool = True) -> str:
    """The inline PTX of ``w4_mma_<fmt>x<count>``: operands ``$0..`` the 8 * count f32
    results (``tmp``'s 4 * count, then ``sx``'s), the 8 * count accumulators in the same
    order, the word and the 2 * count B-fragment words; without ``sums``
    (``w4_mmaq_<fmt>x<count>``) 4 * count results and accumulators, ``tmp``'s alone."""
    n = (8 if sums else 4) * count
    word = f"${2 * n}"
    b = [f"${2 * n + 1 + i}" for i in range(2 * count)]
    magic = f"{MAGIC[fmt]:#010x}"
    lines = ["{", ".reg .b32 p0, p1, p2, p3, w, one;", f"mov.b32 one, {ONES[fmt]:#010x};"]
    lines.append(f"lop3.b32 p0, {word}, 0x000F000F, {magic}, 0xEA;")
    for i in (1, 2, 3):
        lines += [f"shr.u32 w, {word}, {4 * i};", f"lop3.b32 p{i}, w, 0x000F000F, {magic}, 0xEA;"]
    shape = f"mma.sync.aligned.m16n8k16.row.col.f32.{fmt}.{fmt}.f32"
    for j in range(count):
        frag = f"{b[2 * j]}, {b[2 * j + 1]}"
        products = [(4 * j, "p0, p1, p2, p3")]
        products += [(4 * count + 4 * j, "one, one, one, one")] if sums else []
        for first, a in products:
            d = ", ".join(f"${first + i}" for i in range(4))
            c = ", ".join(f"${n + first + i}" for i in range(4))
            lines.append(f"{shape} {{{d}}}, {{{a}}}, {{{frag}}}, {{{c}}};")
    lines.append("}")
    return "\n".join(lines)


def _make_gpu() -> dict[str, Any]:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i32, f32 = ir.IntType(32), ir.FloatType()

    def make_mma(fmt: str, count: int, sums: bool = True) -> Any:
        n = 4 * count
        m = 2 * n if sums else n  # f32 results (and accumulators)
        asm = ir.InlineAsm(
            ir.FunctionType(ir.LiteralStructType([f32] * m), [f32] * m + [i32] * (1 + 2 * count)),
            mma_asm(fmt, count, sums),
            ",".join(["=f"] * m + ["f"] * m + ["r"] * (1 + 2 * count)),
            side_effect=True,  # warp-collective: never moved into divergent code
        )

        def typer(typingctx: Any, *args: Any) -> Any:
            sig = types.void(*args)

            def codegen(context: Any, builder: Any, sig: Any, values: Any) -> Any:
                d_v = values[-1]
                at = [builder.add(d_v, ir.Constant(d_v.type, i)) for i in range(n)]
                arrays = [1 + 2 * count, 2 + 2 * count] if sums else [1 + 2 * count]
                slots = [
                    pointer(context, builder, sig.args[a], values[a], index)
                    for a in arrays
                    for index in at
                ]
                inputs = [builder.load(slot) for slot in slots]
                inputs += [as_i32(builder, v) for v in values[: 1 + 2 * count]]
                result = builder.call(asm, inputs)
                for i, slot in enumerate(slots):
                    builder.store(builder.extract_value(result, i), slot)
                return context.get_dummy_value()

            return sig, codegen

        # (numba's @intrinsic types the parameters its function names)
        if count == 1 and sums:

            def mma1(typingctx, word, b0, b1, tmp, sx, d):
                return typer(typingctx, word, b0, b1, tmp, sx, d)

            return intrinsic(mma1)
        if count == 1:

            def mmaq1(typingctx, word, b0, b1, tmp, d):
                return typer(typingctx, word, b0, b1, tmp, d)

            return intrinsic(mmaq1)
        if sums:

            def mma2(typingctx, word, b0, b1, b2, b3, tmp, sx, d):
                return typer(typingctx, word, b0, b1, b2, b3, tmp, sx, d)

            return intrinsic(mma2)

        def mmaq2(typingctx, word, b0, b1, b2, b3, tmp, d):
            return typer(typingctx, word, b0, b1, b2, b3, tmp, d)

        return intrinsic(mmaq2)

    return _by_name(make_mma)


globals().update(_make_sim() if simulator_enabled() else _make_gpu())
__all__ = helper_names()
