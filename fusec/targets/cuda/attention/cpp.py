"""The CUDA C++ of the fused attention kernel: ``softmax(Q K^T * scale [+ mask]) V``
(an ``ai.attention`` whose mask is none, causal (by index), or, with ``mask``, a tensor
read from memory through broadcast strides; the scale is a constant of the kernel).

One block computes ``BM = 128`` query rows of one (batch, head): FlashAttention's
online softmax on the Hopper core (FA3's structure without its intra-warpgroup
pipelining), as one ``extern "C"`` device function in the shape of the GEMM's:

* warpgroup 0, thread 0 (the producer, 40 registers) loads the block's Q tile
  once and then, per ``BN = 128`` keys, the K and V tiles into a two-stage
  ring (TMA, 128-byte swizzle; K and V have their own ``full``/``empty``
  mbarriers so that Q K^T can start before V has landed);
* two consumer warpgroups own 64 query rows each: ``S = Q K^T`` by
  ``wgmma.m64n128k16`` from shared memory; in registers, ``S * scale * log2 e``,
  the causal / ragged-key mask, the running row maximum (quad shuffles), the
  rescale of the running sum and of O, ``P = exp2(S - m)`` (with a mask tensor:
  ``S * scale + mask`` in natural units, each element read from global memory at its
  broadcast strides, and ``P = exp2((S - m) * log2 e)``, so that a mask of the dtype's
  minimum stays finite until the maximum is subtracted); then
  ``O += P V`` by ``wgmma.m64n{DV}k16`` with P as the A operand *in
  registers*: the accumulator fragment of S, packed to 16-bit pairs, is
  exactly the A fragment of the next wgmma (no shared-memory round trip);
* at the end O / l is rounded once and stored (rows past the sequence are
  not stored). The S x S scores never leave the registers.

Q, K, V and the output are addressed through ``views`` (``attention.views``): where the
group holds the head split, a slice of a fused QKV projection or a GQA head repeat, the
tensor maps span the projection's own ``[B, S, H, D]`` layout (up to 5-D, one
coordinate per batch atom of nonzero stride, computed from the block's ``bh``) and the
output is stored as the head merge's ``[B, S, H, DV]``: no copy kernel moves the heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.ir.dtypes import element_type
from fusec.targets.cuda.attention.views import MaskView, OperandView
from fusec.targets.cuda.headers import ELEMENT_TYPES, enumerators, expand, include, indent_lines
from fusec.targets.cuda.linked import LinkedSpec
from fusec.targets.cuda.ptx import CONSUMER_REGISTERS, PRODUCER_REGISTERS, wgmma_rs, wgmma_ss

BM = 128  # query rows per block: 2 consumer warpgroups x 64
BN = 128  # keys per step
KV_STAGES = 2
THREADS = 384
HEAD_DIMS = (64, 128)
DTYPES = ("f16", "bf16")
MASK_DTYPES = ("f16", "bf16", "f32")


@dataclass(frozen=True)
class AttentionSpec(LinkedSpec):
    """Everything the attention kernel specialises on (all sizes are constants)."""

    batch: int  # flattened batch x heads
    sq: int  # query length
    sk: int  # key length
    d: int  # Q/K head size
    dv: int  # V head size
    dtype: str = "f16"
    out_dtype: str = "f16"
    scale: float = 1.0  # the scores' factor (``ai.attention``'s scale)
    causal: bool = False
    nan_to_zero: bool = False  # a NaN probability is 0 (``ai.attention``'s nan_to_zero)
    #: (offset, row stride, batch atoms) of q, k, v and the output (``OperandView``), where
    #: one is not contiguous ``[batch, rows, cols]``; () when all four are
    views: tuple = ()
    #: an additive mask read from memory (``views.MaskView.as_tuple``: element type,
    #: offset, row stride, column stride, batch atoms; strides 0 where it broadcasts); ()
    #: for none (or causal, by index)
    mask: tuple = ()
    #: Gemma-2's logit soft-capping: the scaled scores are ``softcap * tanh(S * scale /
    #: softcap)`` before the mask (``ai.attention``'s softcap); 0 for none
    softcap: float = 0.0
    #: Rotary position embeddings the kernel applies to q and/or k after loading them
    #: (``x * cos + rotate_half(x) * sin``, the RoPE group ``rope-into-attention`` moved
    #: into the attention's): ``(role, cos, sin)`` for role "q" and "k" as present, cos
    #: and sin ``MaskView.as_tuple``s addressing the factor of element (bh, row, col) of
    #: that operand; () for none
    rope: tuple = ()
    #: the head dims the RoPE rotates, the first ``rotary`` of q's and k's (GPT-NeoX's
    #: partial rotary: ``concat(rope(x[..., :rotary]), x[..., rotary:])``); 0: all ``d``
    rotary: int = 0

    def __post_init__(self) -> None:
        why = problem(self)
        if why:
            raise ValueError(why)

    PREFIX = "attn"

    threads = THREADS

    def cpp_source(self) -> str:
        return expand(generate(self))

    def arg_count(self) -> tuple[int, int]:
        """(u64, int32) kernel parameters: map_q, map_k, map_v, out (and the mask's
        address, and each rotated operand's cos and sin addresses)."""
        return 4 + bool(self.mask) + 2 * len(self.rope), 0

    @property
    def rope_views(self) -> dict[str, tuple[MaskView, MaskView]]:
        """role -> (cos, sin) views of the operands the kernel rotates."""
        return {
            role: (MaskView.from_tuple(cos), MaskView.from_tuple(sin))
            for role, cos, sin in self.rope
        }

    @property
    def mask_view(self) -> MaskView | None:
        return MaskView.from_tuple(self.mask) if self.mask else None

    def view(self, role: str) -> OperandView:
        """How the kernel addresses ``role`` (``"q"``, ``"k"``, ``"v"`` or ``"o"``)."""
        index = "qkvo".index(role)
        if self.views:
            offset, row_stride, batch = self.views[index]
            return OperandView(offset, row_stride, tuple(batch))
        rows = self.sq if role in "qo" else self.sk
        cols = self.d if role in "qk" else self.dv
        return OperandView.contiguous(self.batch, rows, cols)

    @property
    def q_blocks(self) -> int:
        return -(-self.sq // BM)

    @property
    def grid(self) -> int:
        return self.q_blocks * self.batch

    @property
    def smem_bytes(self) -> int:
        q = BM * self.d * 2
        kv = KV_STAGES * BN * (self.d + self.dv) * 2
        return q + kv + 8 * (1 + 4 * KV_STAGES) + 1024

    @property
    def flops(self) -> int:
        full = 2 * self.batch * self.sq * self.sk * (self.d + self.dv)
        return full // 2 if self.causal else full


def problem(spec: AttentionSpec) -> str | None:
    """Why the kernel cannot serve ``spec`` (None when it can)."""
    if spec.dtype not in DTYPES:
        return f"{spec.dtype} attention: the kernel takes f16 or bf16"
    if spec.out_dtype not in ("f16", "bf16", "f32"):
        return f"output type {spec.out_dtype}"
    if spec.d not in HEAD_DIMS or spec.dv not in HEAD_DIMS:
        return f"head sizes {spec.d}/{spec.dv}: the kernel takes 64 or 128"
    if not math.isfinite(spec.scale):
        return f"scale {spec.scale}: not a finite number"
    if not (math.isfinite(spec.softcap) and spec.softcap >= 0):
        return f"softcap {spec.softcap}: not a finite number >= 0"
    if spec.causal and spec.sq != spec.sk:
        return "a causal mask with different query and key lengths"
    if min(spec.batch, spec.sq, spec.sk) < 1:
        return "an empty dimension"
    if spec.views and len(spec.views) != 4:
        return "views: one for each of q, k, v and the output"
    ropes = spec.rope_views
    if set(ropes) - {"q", "k"} or len(ropes) != len(spec.rope):
        return f"rope for {[r for r, _, _ in spec.rope]}: the kernel rotates q and k once each"
    for role, pair in ropes.items():
        if any(v.dtype not in MASK_DTYPES for v in pair):
            return f"{role}'s cos/sin of {[v.dtype for v in pair]}: the kernel reads f16, bf16, f32"
        if len({v.dtype for views in ropes.values() for v in views}) > 1:
            return "cos and sin of different element types"
        if any(math.prod(n for n, _ in v.batch) != spec.batch for v in pair):
            return f"{role}'s cos/sin batch atoms are not a batch of {spec.batch}"
    if spec.rotary and not (spec.rope and 16 <= spec.rotary < spec.d and spec.rotary % 16 == 0):
        return (
            f"RoPE of the first {spec.rotary} of {spec.d} head dims: the kernel rotates a "
            "multiple of 16 below the head size, with rope"
        )
    mask = spec.mask_view
    if mask is not None:
        if mask.dtype not in MASK_DTYPES:
            return f"a {mask.dtype} mask: the kernel reads f16, bf16 or f32 ones"
        if math.prod(n for n, _ in mask.batch) != spec.batch:
            return f"the mask's batch atoms {mask.batch} are not a batch of {spec.batch}"
    for role in "qkvo" if spec.views else "":
        view = spec.view(role)
        if math.prod(n for n, _ in view.batch) != spec.batch:
            return f"the {role} view's batch atoms {view.batch} are not a batch of {spec.batch}"
        if role == "o" and any(s == 0 for _, s in view.batch):
            return "the output view repeats elements"
    return None


def _digit(size: int, div: int, outermost: bool) -> str:
    value = "bh" if div == 1 else f"(bh / {div})"
    return value if outermost else f"({value} % {size})"


def _views(spec: AttentionSpec) -> str:
    """``Config``'s loads of Q, K and V (a tensor map of 3 to 5 dimensions: head size,
    rows, the batch atoms) and the output's element offset of (bh, row)."""
    lines = []
    for role in "qkv":
        view = spec.view(role)
        total = spec.batch
        coords = [_digit(n, div, n * div == total) for n, _, div in view.map_atoms]
        lines += [
            f"static __device__ __forceinline__ void load_{role}(u32 dst, u64 map, u32 bar, "
            "int c0, int row, int bh) {",
            f"  fs_tma_load(dst, map, bar, c0, row, {', '.join(reversed(coords)) or '0'});",
            "}",
        ]
    out = spec.view("o")
    lines += _offset_function(
        "out_offset", spec.batch, out.batch, {"row": out.row_stride}, out.offset
    )
    mask = spec.mask_view
    if mask is not None:
        strides = {"row": mask.row_stride, "col": mask.col_stride}
        lines += _offset_function("mask_offset", spec.batch, mask.batch, strides, mask.offset)
    for role, pair in spec.rope_views.items():
        for which, factor in zip(("cos", "sin"), pair, strict=True):
            strides = {"row": factor.row_stride, "col": factor.col_stride}
            name = f"{role}_{which}_offset"
            lines += _offset_function(name, spec.batch, factor.batch, strides, factor.offset)
    return "\n".join(lines)


def _offset_function(
    name: str, batch: int, atoms: tuple, strides: dict[str, int], offset: int
) -> list[str]:
    """``long long name(int bh, int <index>...)``: the element offset of batch-head ``bh``
    (its digits in ``atoms``) and of each index at its stride (0: a broadcast index adds
    nothing), plus ``offset``."""
    terms = _batch_terms(batch, atoms)
    terms += [f"(long long){index} * {stride}" for index, stride in strides.items() if stride]
    if offset:
        terms.append(str(offset))
    params = ", ".join(f"int {index}" for index in ("bh", *strides))
    return [
        f"static __device__ __forceinline__ long long {name}({params}) {{",
        f"  return {' + '.join(reversed(terms)) or '0'};",
        "}",
    ]


def _batch_terms(batch: int, atoms: tuple) -> list[str]:
    """The element offset of ``bh``'s digits in ``atoms`` ((size, stride), outer first;
    stride-0 digits add nothing), innermost first."""
    terms, div = [], 1
    for n, s in reversed(atoms):
        if s:
            terms.append(f"(long long){_digit(n, div, n * div == batch)} * {s}")
        div *= n
    return terms


def _rope_vectors(spec: AttentionSpec) -> bool:
    """Whether the kernel may read the RoPE factors 8 at a time (16-byte vectors): every
    cos and sin view contiguous along the head dim with its offset, row and batch strides
    whole 16-byte steps, so that each run of 8 factors from a multiple of 8 starts 16-byte
    aligned past the table's address (the kernel checks that address at run time)."""
    views = [view for pair in spec.rope_views.values() for view in pair]
    if not views:
        return False
    step = 16 // element_type(views[0].dtype).itemsize
    return all(
        view.col_stride == 1
        and all(n % step == 0 for n in (view.offset, view.row_stride))
        and all(stride % step == 0 for _, stride in view.batch)
        for view in views
    )


def _config(spec: AttentionSpec) -> str:
    """``struct Config``: the compile-time parameters of ``fusec::attention`` (attention.cuh)
    and its two wgmma instructions."""
    scale_log2 = float(spec.scale) * 1.4426950408889634  # a number: no user text in the C++
    ints = {
        "BM": BM, "BN": BN, "SQ": spec.sq, "SK": spec.sk, "D": spec.d, "DV": spec.dv,
        "QB": spec.q_blocks, "NKV": -(-spec.sk // BN), "KV_STAGES": KV_STAGES,
        "CAUSAL": int(spec.causal), "NAN_TO_ZERO": int(spec.nan_to_zero),
        "MASK": int(bool(spec.mask)), "SOFTCAP": int(spec.softcap > 0),
        "ROPE_Q": int("q" in spec.rope_views), "ROPE_K": int("k" in spec.rope_views),
        "ROT": spec.rotary or spec.d, "ROPE_VEC": int(_rope_vectors(spec)),
        "PRODUCER_REGISTERS": PRODUCER_REGISTERS, "CONSUMER_REGISTERS": CONSUMER_REGISTERS,
    }  # fmt: skip
    mma = wgmma_ss("qk", BN, spec.dtype, 0, 0) + wgmma_rs("pv", spec.dv, spec.dtype, 1)
    # with no softcap the kernel never calls these: 1s keep the text free of inf
    cap = float(spec.softcap) if spec.softcap > 0 else 1.0
    scale_over_cap = float(spec.scale) / cap
    mask = spec.mask_view
    rope_dtype = next((v.dtype for pair in spec.rope_views.values() for v in pair), "f32")
    return f"""struct Config {{
  enum : int {{
{enumerators([f"{k} = {v}" for k, v in ints.items()])}
  }};
  static __host__ __device__ constexpr float sl2() {{ return {scale_log2!r}f; }}
  static __host__ __device__ constexpr float scale() {{ return {float(spec.scale)!r}f; }}
  static __host__ __device__ constexpr float cap() {{ return {cap!r}f; }}
  static __host__ __device__ constexpr float scale_over_cap() {{ return {scale_over_cap!r}f; }}
  using In = {ELEMENT_TYPES[spec.dtype]};
  using Out = {ELEMENT_TYPES[spec.out_dtype]};
  using Mask = {ELEMENT_TYPES[mask.dtype if mask else "f32"]};
  using Rope = {ELEMENT_TYPES[rope_dtype]};
{indent_lines(mma.strip(), 2)}
{indent_lines(_views(spec), 2)}
}};
"""


def generate(spec: AttentionSpec) -> str:
    """The ``.cu`` source of ``spec``'s device function as the template writes it: the
    kernel layer's ``fusec/attention.cuh``, the instantiation's ``Config`` and the
    ``extern "C"`` wrapper (``cpp_source`` inlines the header)."""
    mask = " + causal mask" if spec.causal else ""
    mask += " + mask (read from memory)" if spec.mask else ""
    scores = f"softcap * tanh(Q K^T * scale / softcap){mask}" if spec.softcap else ""
    scores = scores or f"Q K^T * scale{mask}"
    extra, passed = (", u64 mask", ", mask") if spec.mask else ("", "")
    ropes = spec.rope_views
    if ropes:
        names = [f"{r}_{w}" for r in "qk" for w in ("cos", "sin")]
        given = [n if n[0] in ropes else "0" for n in names]
        extra += "".join(f", u64 {n}" for n in names if n[0] in ropes)
        passed = (passed or ", 0") + "".join(f", {g}" for g in given)
    cap = f", softcap {spec.softcap!r}" if spec.softcap else ""
    part = f" (the first {spec.rotary} head dims)" if spec.rotary else ""
    cap += f", RoPE of {' and '.join(ropes)}{part} in shared memory after the load" if ropes else ""
    return f"""// fusec generated fused attention: softmax({scores}) V
// batch {spec.batch}, {spec.sq} queries x {spec.sk} keys, head {spec.d}/{spec.dv}, {spec.dtype},
// scale {spec.scale!r}{cap}
{include("attention")}
{_config(spec)}
extern "C" __device__ __attribute__((always_inline))
int {spec.function_name}(int* ret, u64 smem_raw, u64 map_q, u64 map_k, u64 map_v, u64 out{extra}) {{
  return fusec::attention<Config>(smem_raw, map_q, map_k, map_v, out{passed});
}}
"""
