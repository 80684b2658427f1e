"""The CUDA C++ of the conv2d templates: implicit GEMM on the Hopper core, and direct.

``ConvSpec`` (implicit GEMM, see ``config``): one ``extern "C"`` device
function, the whole block program of a warp-specialised persistent kernel, in
the shape of the GEMM's (``gemm.cpp``):

* warpgroup 0, thread 0 (the producer, 40 registers) walks the block's tiles
  and, per reduction step (tap ``r, s``, channel chunk ``cc``), issues one 4-D
  TMA box of the re-laid weights (``bm`` output channels x 64 channels,
  K-major) and one 5-D TMA box per pixel strip of the channels-last input
  (64 pixels x 64 channels at ``(cc*64, g, q0*SW + s*DW - PL, p*SH + r*DH - PT,
  n)``, stepping SW pixels along W: TMA's traversal stride, so a strided conv reads
  only the pixels it uses: K-major, 128-byte swizzle; padding and ragged edges are
  zero fill);
* consumer warpgroups (232 registers) run ``wgmma.m64n{wn}k16`` on their
  rows (split "m") or columns (split "n") of the tile and then the epilogue
  on the f32 accumulators at output element ``(n, k, p, q)``, stored into the
  NCHW output with bounds checks (adjacent pixels as one 32/64-bit store when
  Q is even).

Two small ``__global__`` kernels in the same module run first on the same
stream: the weights to ``[K][R*S][CGP]`` and the input to channels-last
``[N][H][W][G][CGP]`` (8 x 8 blocks transposed in registers, ``transpose``);
neither when the group takes them so (``weight="krsc"``, ``input="given"``: the
``conv-layout`` pass relaid them in the IR). TMA requires the
innermost coordinate of a box to be 16-byte aligned, so the tap shifts must
not move along the contiguous dimension: reading NCHW in place by shifting
along W was an illegal instruction on the H200.

``input="nchw"`` (opt-in, ``template.INPUT_ENV``): no channels-last copy; the
producer reads the NCHW input in place, one 5-D TMA box ``(W, H, CG, G, N)`` of
64 pixels x 64 channels per strip at ``(q0 + s*DW - PL, p*SH + r*DH - PT,
cc*64, g, n)``: a ``[channel][pixel]`` tile of 128-byte rows, the MN-major B
operand (wgmma's transposed B, the GEMM's ``b_major="n"`` descriptor). Only for
shapes whose every tap shift along W is a multiple of 8 pixels
(``nchw_input_problem``): TMA reads must start 16-byte aligned, so a 3x3 conv
with padding 1 (shifts -1, 0, 1) cannot take it.

``DirectConvSpec``: a grid-stride direct convolution (one output element per
thread and step, f32 accumulation, the same epilogue), for what is not a GEMM:
depthwise and other few-channel grouped convolutions.

Every size is a compile-time constant (a kernel per conv shape, as the graph's
shapes are static), so index divisions are multiplications.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusec.targets.cuda.conv.config import (
    MAX_STRIDE_W,
    STRIP,
    ConvGeometry,
    ConvTile,
    cdiv,
    tile_count,
)
from fusec.targets.cuda.conv.im2col import Im2col
from fusec.targets.cuda.conv.transpose import TransposeTiling, transpose_config, transpose_kernel
from fusec.targets.cuda.epilogue import Epilogue
from fusec.targets.cuda.headers import ELEMENT_TYPES, enumerators, expand, include, indent_lines
from fusec.targets.cuda.linked import LinkedSpec
from fusec.targets.cuda.ptx import CONSUMER_REGISTERS, PRODUCER_REGISTERS, wgmma_ss

DTYPES = ("f16", "bf16")
OUT_DTYPES = ("f16", "bf16", "f32")
#: how the implicit GEMM reads its input: "nhwc" = a channels-last copy first, "nchw" = in
#: place by TMA, "nchw-ld" = in place by the producer warpgroup's 16-byte loads
INPUTS = ("nhwc", "nchw", "nchw-ld")
#: ... and "given": the input already is channels-last ``[N][H][W][C]`` (the previous conv
#: group wrote it so: ``out_layout="nhwc"``, the opt-in conv -> conv hand-off); "im2col":
#: the GEMM is the 1x1 conv over the im2col matrix of the conv ``ConvSpec.source``, written
#: per call by a small kernel (``im2col``: few-channel stems)
LAYOUTS = (*INPUTS, "given", "im2col")
#: how the weights come: KCRS (re-laid out per call) or KRSC (as they are)
WEIGHTS = ("kcrs", "krsc")
#: TMA reads start 16-byte aligned: a W coordinate must be a multiple of this many pixels
TMA_ALIGN_PIXELS = 8
#: when the implicit GEMM's epilogue reads its per-channel and output-shaped inputs
EPILOGUE_LOADS = ("inline", "early")
#: "early" loads of the output-shaped inputs are issued at the head of the tile (held in
#: registers through its main loop) up to this many 32-bit words a thread, else at the head
#: of each output row of the epilogue (the consumers have 232 registers, 64-128 of them
#: accumulators)
EARLY_TILE_WORDS = 32


def _geometry(geo: ConvGeometry) -> dict[str, int]:
    """The conv's sizes by the names the C++ uses (``C`` is ``CIN`` in a Config)."""
    values = {
        "NB": geo.n,
        "C": geo.c,
        "H": geo.h,
        "W": geo.w,
        "KOUT": geo.k,
        "G": geo.groups,
        "CG": geo.cg,
        "KG": geo.kg,
        "CGP": geo.cgp,
        "R": geo.r,
        "S": geo.s,
        "SH": geo.stride_h,
        "SW": geo.stride_w,
        "DH": geo.dil_h,
        "DW": geo.dil_w,
        "PT": geo.pad_top,
        "PL": geo.pad_left,
        "P": geo.p,
        "Q": geo.q,
    }
    return {name: int(value) for name, value in values.items()}


def _geometry_enumerators(geo: ConvGeometry) -> str:
    names = {"C": "CIN"}
    return enumerators([f"{names.get(k, k)} = {v}" for k, v in _geometry(geo).items()])


def _epilogue_function(epilogue: Epilogue) -> str:
    """``fs_epilogue(acc, n, k, p, q, e0..., ev...)``: the group's elementwise tail at one
    output element; the body reads ``acc``, the NCHW indices ``i0..i3`` and the values
    ``ev<slot>`` the kernel loaded for it (``Epilogue.channel_args``, ``pixel_args``)."""
    extras = "".join(f", const void* e{k}" for k in range(len(epilogue.extras)))
    extras += "".join(f", float ev{slot}" for slot in _loaded_args(epilogue))
    body = "\n".join("  " + line for line in epilogue.body.splitlines())
    return f"""{epilogue.helpers}
static __device__ __forceinline__ float fs_epilogue(float acc, int n_, int k_, int p_,
                                                   int q_{extras}) {{
  const long long i0 = n_, i1 = k_, i2 = p_, i3 = q_;
  float y;
{body}
  return y;
}}
"""


def _loaded_args(epilogue: Epilogue) -> tuple[int, ...]:
    """The extra slots the kernel loads and passes to ``fs_epilogue``, in parameter order."""
    return epilogue.channel_args + epilogue.pixel_args


#: output element (n, ko, p, q)'s offset in an NHWC tensor ``[N][P][Q][KOUT]`` of the
#: output's shape (a channels-last residual), as the generated Config's names spell it
NHWC_OFFSET = "(((long long)n * P + p) * Q + q) * KOUT + ko"


def _inline_args(epilogue: Epilogue, ko: str, index: str, nhwc_index: str = "") -> str:
    """``fs_epilogue``'s loaded arguments read at the call (channel ``ko``, NCHW element
    ``index``, NHWC element ``nhwc_index`` for ``pixel_nhwc``): the direct template's, and
    the implicit GEMM's with ``loads="inline"``."""
    if epilogue.pixel_nhwc and not nhwc_index:
        raise ValueError("this conv kernel reads no channels-last residual")
    args = [f"fs_ld_{epilogue.extras[s]}((const void*)e{s}, {ko})" for s in epilogue.channel_args]
    args += [
        f"fs_ld_{epilogue.extras[s]}((const void*)e{s}, "
        f"{nhwc_index if s in epilogue.pixel_nhwc else index})"
        for s in epilogue.pixel_args
    ]
    return "".join(f", {a}" for a in args)


def _shape_comment(geo: ConvGeometry) -> str:
    return (
        f"N{geo.n} C{geo.c} H{geo.h} W{geo.w} -> K{geo.k} P{geo.p} Q{geo.q}, "
        f"{geo.r}x{geo.s}, groups {geo.groups}"
    )


def _source_comment(spec: ConvSpec) -> str:
    src = spec.source
    if src is None:
        return ""
    return (
        f"\n// the im2col matrix of {_shape_comment(src)}, stride {src.stride_h}x{src.stride_w}, "
        f"pad {src.pad_top},{src.pad_left},{src.pad_bottom},{src.pad_right}, "
        f"dilation {src.dil_h}x{src.dil_w}"
    )


def _check_types(dtype: str, out_dtype: str, epilogue: Epilogue) -> None:
    if dtype not in DTYPES or out_dtype not in OUT_DTYPES:
        raise ValueError(f"unsupported conv types {dtype} -> {out_dtype}")
    for extra in epilogue.extras:
        if extra not in OUT_DTYPES:
            raise ValueError(f"epilogue input type {extra!r}")


@dataclass(frozen=True)
class ConvSpec(LinkedSpec):
    """Everything the implicit-GEMM conv kernel specialises on."""

    geo: ConvGeometry
    tile: ConvTile = field(default_factory=ConvTile)
    dtype: str = "f16"
    out_dtype: str = "f16"
    epilogue: Epilogue = field(default_factory=Epilogue)
    input: str = "nhwc"
    #: when the epilogue's loaded inputs (``Epilogue.channel_args``, ``pixel_args``) are
    #: read: "inline" (at each element, behind its bounds check) or "early" (all of a
    #: thread's, branch-free predicated loads issued at the head of the tile or of each
    #: output row of the epilogue, before the first use: ``_early_placement``)
    epilogue_loads: str = "inline"
    #: "nchw", or "nhwc": the output stored channels-last ``[N][P][Q][K]`` for a next conv
    #: group that reads it as its ``input="given"``
    out_layout: str = "nchw"
    #: "kcrs": the weights re-laid out to ``[K][R*S][CGP]`` per call (``relayout_name``);
    #: "krsc": given as ``[K][R][S][C]`` (``C % 8 == 0``, one group: no padding), read as is
    weight: str = "kcrs"
    #: ``input="im2col"``: the conv whose im2col matrix the GEMM reads (``geo`` is its
    #: ``im2col()``); None otherwise
    source: ConvGeometry | None = None
    #: the weights a constant of the program, read as given (KRSC; no kernel writes them):
    #: the kernel waits for the kernels before it itself, its producer after issuing the
    #: first stages' weight boxes (``conv.cuh``; ``fusec.targets.cuda.dependent``)
    early_w: bool = False

    def __post_init__(self) -> None:
        _check_types(self.dtype, self.out_dtype, self.epilogue)
        if self.early_w and not self.weights_as_given:
            raise ValueError("early weights: KRSC weights read as given, the TMA producer")
        if (self.input == "im2col") != (self.source is not None):
            raise ValueError('a conv source geometry goes with input="im2col" (and only there)')
        im2col = self.im2col  # building it checks the source (im2col_problem)
        if im2col is not None and (self.geo != im2col.gemm or self.weight != "kcrs"):
            raise ValueError("an im2col conv is the 1x1 conv source.im2col(), KCRS weights")
        if self.weight not in WEIGHTS:
            raise ValueError(f"conv weight layout {self.weight!r}, expected one of {WEIGHTS}")
        if self.weight == "krsc" and (self.geo.groups != 1 or self.geo.cgp != self.geo.cg):
            raise ValueError("KRSC weights are [K][R][S][C]: one group, C % 8 == 0")
        if self.input not in LAYOUTS:
            raise ValueError(f"conv input layout {self.input!r}, expected one of {LAYOUTS}")
        if self.out_layout not in ("nchw", "nhwc"):
            raise ValueError(f"conv output layout {self.out_layout!r}")
        if self.input == "given" and (self.geo.groups != 1 or self.geo.cgp != self.geo.cg):
            raise ValueError("a channels-last input is [N][H][W][C]: one group, C % 8 == 0")
        if self.epilogue_loads not in EPILOGUE_LOADS:
            raise ValueError(
                f"conv epilogue loads {self.epilogue_loads!r}, expected one of {EPILOGUE_LOADS}"
            )
        why = implicit_gemm_problem(self.geo)
        if not why and self.input in ("nchw", "nchw-ld"):
            why = nchw_input_problem(self.geo, tma=self.input == "nchw")
        if not why and self.input in ("nchw", "nchw-ld") and self.geo.strip_rows != 1:
            why = f"input {self.input!r} reads a strip as one row: geometry max_strip_rows=1"
        if why:
            raise ValueError(why)

    PREFIX = "conv"

    @property
    def waits_in_body(self) -> bool:
        return self.early_w

    @property
    def weights_as_given(self) -> bool:
        """The kernel reads the weights themselves (KRSC, no re-layout) through the TMA
        producer: what early weights (``early_w``) need."""
        return self.weight == "krsc" and self.input != "nchw-ld"

    @property
    def relayout_name(self) -> str:
        """The ``__global__`` kernel that re-lays the weights out (KCRS -> K, R*S, CGP)."""
        return f"fusec_convw_{self.key}"

    @property
    def transpose_name(self) -> str:
        """The ``__global__`` kernel that makes the input channels-last (N, H, W, G, CGP)."""
        return f"fusec_convx_{self.key}"

    @property
    def transpose_scalar_name(self) -> str | None:
        """The 2-byte-load twin of ``transpose_name`` for an input that is not 16-byte
        aligned, when ``transpose_name`` is the 16-byte-load one (else None)."""
        return f"fusec_convxs_{self.key}" if self.transposing.vectorizable else None

    @property
    def im2col_name(self) -> str:
        """The ``__global__`` kernel that writes the im2col matrix (``input="im2col"``)."""
        return f"fusec_convi_{self.key}"

    @property
    def im2col(self) -> Im2col | None:
        return Im2col(self.source) if self.source is not None else None

    @property
    def copies_input(self) -> bool:
        """Whether a channels-last copy of the input runs before the conv kernel."""
        return self.input == "nhwc"

    @property
    def transposing(self) -> TransposeTiling:
        return TransposeTiling(self.geo)

    @property
    def relayouts_weights(self) -> bool:
        """Whether the weights are re-laid out (``relayout_name``) before the conv kernel."""
        return self.weight == "kcrs"

    @property
    def named_kernels(self) -> tuple[str, ...]:
        """The ``__global__`` kernels of the module besides Numba's."""
        names: tuple[str | None, ...] = (self.relayout_name if self.relayouts_weights else None,)
        if self.copies_input:
            names += (self.transpose_name, self.transpose_scalar_name)
        if self.im2col is not None:
            names += (self.im2col_name,)
        return tuple(name for name in names if name)

    @property
    def threads(self) -> int:
        return self.tile.threads

    def cpp_source(self) -> str:
        return expand(generate(self))

    def kernel_params(self) -> list[str]:
        """The kernel's (u64) parameters after the shared-memory address."""
        x = "x" if self.input == "nchw-ld" else "map_x"
        extras = [f"e{k}" for k in range(len(self.epilogue.extras))]
        split = ["split_ws", "split_counters"] if self.tile.split_k > 1 else []
        return ["map_w", x, "out", *extras, *split]

    def arg_count(self) -> tuple[int, int]:
        return len(self.kernel_params()), 0

    @property
    def tiles(self) -> int:
        return tile_count(self.tile, self.geo)


def implicit_gemm_problem(geo: ConvGeometry) -> str | None:
    """Why the implicit GEMM cannot run ``geo`` (None when it can). A stride along W is
    the channels-last box's traversal step (``config.nhwc_element_strides``); the NCHW
    in-place reads cannot take one (``nchw_input_problem``)."""
    if geo.stride_w > MAX_STRIDE_W:
        return (
            f"stride along W of {geo.stride_w} > {MAX_STRIDE_W}: a TMA box traverses at most "
            f"256 pixels, and a strip of {STRIP} output pixels would span {STRIP * geo.stride_w}"
        )
    if max(geo.stride_h, geo.dil_h, geo.dil_w) > 1 << 15 or geo.n * geo.c * geo.h * geo.w >= 2**31:
        return "sizes beyond 32-bit coordinates"
    return None


def nchw_input_problem(geo: ConvGeometry, tma: bool = True) -> str | None:
    """Why the kernel cannot read ``geo``'s NCHW input in place by TMA (``tma``), or by
    16-byte loads of whole 8-pixel vectors (None when it can).

    A TMA tile read must start 16-byte aligned (on the H200 an NCHW box shifted by one
    pixel along W was an illegal instruction; Triton and TileLang document the same
    rule), so every tap's shift along W, ``s*DW - PL``, must be a multiple of 8 pixels,
    and the row pitch ``W`` too (the strides of a tensor map are multiples of 16 bytes).
    """
    if geo.stride_w != 1:
        return "stride along W > 1: TMA cannot stride the innermost (contiguous) dimension"
    if not tma:
        return nchw_pitch_problem(geo)
    shifts = sorted({s * geo.dil_w - geo.pad_left for s in range(geo.s)})
    odd = [d for d in shifts if d % TMA_ALIGN_PIXELS]
    if odd:
        return (
            f"tap shifts along W of {odd} pixels: a TMA read must start 16-byte aligned "
            f"(shifts in multiples of {TMA_ALIGN_PIXELS})"
        )
    return nchw_pitch_problem(geo)


def nchw_pitch_problem(geo: ConvGeometry) -> str | None:
    """Why NCHW rows of ``geo`` are not whole 16-byte vectors (None when they are)."""
    if geo.w % TMA_ALIGN_PIXELS:
        return f"W = {geo.w}: the NCHW row pitch is not a multiple of 16 bytes"
    return None


def _weights_kernel(spec: ConvSpec) -> str:
    """The ``__global__`` re-layout of the weights, KCRS -> ``[KOUT][R*S][CGP]``."""
    return f"""// Weights KCRS -> [KOUT][R*S][CGP], channels CG..CGP-1 zero (the TMA map reads CG of
// them).
extern "C" __global__ void {spec.relayout_name}(const u16* __restrict__ w, u16* __restrict__ wp) {{
  fusec::conv_relayout_weights<Config>(w, wp);
}}

"""


def _transpose_kernels(spec: ConvSpec) -> str:
    """The channels-last copies of the input (``transpose``): 16-byte loads when every
    channel row is aligned, with a 2-byte-load twin for a misaligned input."""
    tiling = spec.transposing
    kernels = [transpose_kernel(spec.transpose_name, "Xt", tiling, tiling.vectorizable)]
    if spec.transpose_scalar_name:
        kernels.append(transpose_kernel(spec.transpose_scalar_name, "Xt", tiling, False))
    return "\n".join(kernels)


def _transpose_config(spec: ConvSpec) -> str:
    """The channels-last copy's header and constants."""
    if not spec.copies_input:
        return ""
    return include("relayout") + transpose_config("Xt", spec.transposing)


#: ``nchw-ld``: the producer warpgroup holds 9 input vectors a row; 72 + 2 x 216 = 3 x 168,
#: the same register file as the TMA producer's 40 + 2 x 232
LD_PRODUCER_REGISTERS = 72
LD_CONSUMER_REGISTERS = 216
_INPUT = {
    "nhwc": "fusec::CONV_INPUT_NHWC",
    "given": "fusec::CONV_INPUT_NHWC",
    "im2col": "fusec::CONV_INPUT_NHWC",
    "nchw": "fusec::CONV_INPUT_NCHW",
    "nchw-ld": "fusec::CONV_INPUT_LD",
}


def _config(spec: ConvSpec) -> str:
    """``struct Config``: the compile-time parameters of ``fusec::conv`` (conv.cuh) and its
    wgmma instruction (B MN-major when the input is read NCHW in place)."""
    geo, tile = spec.geo, spec.tile
    loads = spec.input == "nchw-ld"
    ints = {
        "BM": tile.bm, "BN": tile.bn, "WM": tile.wm, "WN": tile.wn, "STAGES": tile.stages,
        "CONSUMERS": tile.consumers, "SPT": tile.bn // STRIP, "QS": geo.strips_per_row,
        "TW": geo.strip_width, "TH": geo.strip_rows, "PS": geo.strip_bands,
        "STRIPS": geo.strips, "CC": geo.chunks, "KBLOCKS": geo.kblocks,
        "TILES_M": cdiv(geo.kg, tile.bm), "TILES_N": cdiv(geo.strips, tile.bn // STRIP),
        "TILES": spec.tiles, "A_BYTES": tile.a_stage_bytes, "B_BYTES": tile.b_stage_bytes,
        "INPUT": _INPUT[spec.input], "SPLIT_N": int(tile.split == "n"),
        "OUT_NHWC": int(spec.out_layout == "nhwc"), "SPLIT_K": tile.split_k,
        "PRODUCER_REGISTERS": LD_PRODUCER_REGISTERS if loads else PRODUCER_REGISTERS,
        "CONSUMER_REGISTERS": LD_CONSUMER_REGISTERS if loads else CONSUMER_REGISTERS,
        "FULL_ARRIVALS": 1 + 128 if loads else 1,  # + every producer thread after its stores
        "EARLY_W": int(spec.early_w),
    }  # fmt: skip
    nchw = spec.input in ("nchw", "nchw-ld")
    mma = wgmma_ss("mma", tile.wn, spec.dtype, 0, 1 if nchw else 0).strip()
    return f"""struct Config {{
  enum : int {{
{_geometry_enumerators(geo)}
  }};
  enum : int {{
{enumerators([f"{k} = {v}" for k, v in ints.items()])}
  }};
  using Out = {ELEMENT_TYPES[spec.out_dtype]};
{indent_lines(mma, 2)}
}};
"""


def _functor(spec: ConvSpec) -> str:
    """``struct Epilogue``: the epilogue functor of ``fusec::conv`` (its inputs' pointers,
    the early loads' words, the call of ``fs_epilogue``). It derives from ``Config``, whose
    constants the early loads read."""
    epi = spec.epilogue
    n = len(epi.extras)
    members = "".join(f"  u64 e{k};\n" for k in range(n))
    placement = _early_placement(spec) if _early(spec) else ""
    arrays = {rows: _early_arrays(spec, rows if placement == rows else "") for rows in ROWS}
    loads = {rows: _early_loads(spec, rows) if placement == rows else "" for rows in ROWS}
    head = "  __device__ __forceinline__"
    extras = "".join(f", (const void*)e{k}" for k in range(n))
    first, second = extras + _call_args(spec, False), extras + _call_args(spec, True)
    return f"""struct Epilogue : Config {{
{members}{_word_structs(arrays)}
{head} bool wide() const {{ return {_wide_test(spec)}; }}
{head} void load_tile(TileChannels& c, TilePixels& px, bool wide, int pm, int pn, int g,
                       int cw, int warp, int lane) const {{{loads["tile"]}}}
{head} void load_row(RowChannels& c, RowPixels& px, bool wide, int pn, int cw, int lane,
                      int ko) const {{{loads["row"]}}}
  template <int SECOND>
{head} float at(float acc, int n, int ko, int p, int q, long long o, int m, int h, int sj,
                 int qe, const TileChannels& tc, const TilePixels& tp, const RowChannels& rc,
                 const RowPixels& rp) const {{
    if constexpr (SECOND) {{
      return fs_epilogue(acc, n, ko, p, q{second});
    }} else {{
      return fs_epilogue(acc, n, ko, p, q{first});
    }}
  }}
}};
"""


def generate(spec: ConvSpec) -> str:
    """The ``.cu`` source of ``spec`` as the template writes it: the kernel layer's
    ``fusec/conv.cuh``, the epilogue function, the instantiation's ``Config`` and
    ``Epilogue``, the weights' and the input's re-layout kernels, and the ``extern "C"``
    wrapper (``cpp_source`` inlines the headers)."""
    geo, tile = spec.geo, spec.tile
    headline = f"tile {tile.text}, {spec.dtype} -> {spec.out_dtype}"
    headline += {
        "nchw": ", NCHW input read in place",
        "nchw-ld": ", NCHW input loaded by threads",
        "given": ", channels-last input given",
        "im2col": ", the im2col matrix's 1x1 conv",
    }.get(spec.input, "")
    if spec.out_layout == "nhwc":
        headline += ", channels-last output"
    if spec.early_w:
        headline += ", constant weights loaded before the grid dependency wait"
    params = ", ".join(f"u64 {n}" for n in spec.kernel_params())
    pointers = ", ".join(["{}", *(f"e{k}" for k in range(len(spec.epilogue.extras)))])
    x = spec.kernel_params()[1]
    split = "split_ws, split_counters" if tile.split_k > 1 else "0, 0"
    return f"""// fusec generated implicit-GEMM conv2d: {headline}
// {_shape_comment(geo)}{_source_comment(spec)}
// epilogue {spec.epilogue.name}
{include("conv")}{_transpose_config(spec)}
{_epilogue_function(spec.epilogue)}
{_config(spec)}
{_functor(spec)}
{_weights_kernel(spec) if spec.relayouts_weights else ""}\
{_transpose_kernels(spec) if spec.copies_input else ""}\
{spec.im2col.kernel(spec.im2col_name) if spec.im2col else ""}
extern "C" __device__ __attribute__((always_inline))
int {spec.function_name}(int* ret, u64 smem_raw, {params}) {{
  const Epilogue epi{{{pointers}}};
  return fusec::conv<Config>(epi, smem_raw, map_w, {x}, out, {split});
}}
"""


#: where a thread's early loads go (``_early_placement``)
ROWS = ("tile", "row")


def _pixel_words(spec: ConvSpec, slot: int) -> int:
    """32-bit words per output pair (q, q + 1) of output-shaped input ``slot``: one when
    it is 16-bit, NCHW and Q even (the pair is one aligned word), else two (an NHWC
    input's pair is KOUT elements apart)."""
    epi = spec.epilogue
    one = epi.extras[slot] != "f32" and spec.geo.q % 2 == 0 and slot not in epi.pixel_nhwc
    return 1 if one else 2


def _early(spec: ConvSpec) -> bool:
    return spec.epilogue_loads == "early" and bool(_loaded_args(spec.epilogue))


def _early_placement(spec: ConvSpec) -> str:
    """ "tile": a thread's early loads at the head of each tile, before its main loop (the
    latency hides behind the MMAs); "row": at the head of each of its output rows in the
    epilogue (fewer live registers), when the tile's would exceed ``EARLY_TILE_WORDS``."""
    pairs = (spec.tile.wm // 64) * 2 * (spec.tile.wn // 64) * 8
    words = sum(pairs * _pixel_words(spec, s) for s in spec.epilogue.pixel_args)
    return "tile" if words <= EARLY_TILE_WORDS else "row"


def _wide_test(spec: ConvSpec) -> str:
    """``wide``: every 16-bit output-shaped input of one word per pair has a 4-byte aligned
    base (then every pair is one aligned word: Q and q are even)."""
    if not _early(spec):
        return "true"
    slots = [s for s in spec.epilogue.pixel_args if _pixel_words(spec, s) == 1]
    return " && ".join(f"((u64)e{s} & 3ull) == 0" for s in slots) or "true"


def _word_structs(arrays: dict[str, tuple[str, str]]) -> str:
    """The functor's structs of early-load words, channel words apart from pixel words:
    SROA takes a row's constant-indexed channel words to registers before the loops are
    unrolled only in a struct without the loop-indexed pixel words."""
    return "\n".join(
        f"  struct {rows.title()}{kind} {{{arrays[rows][i]}}};"
        for rows in ROWS
        for i, kind in enumerate(("Channels", "Pixels"))
    )


def _early_arrays(spec: ConvSpec, rows: str) -> tuple[str, str]:
    """The words of the early loads of ``rows`` ("tile": every (m, h) of the thread, "row":
    the current one; "": none): ``evc<slot>[]`` (channel words), ``evp<slot>[]`` (pixel
    words), as members."""
    epi = spec.epilogue
    if not rows:
        return "", ""
    nrows = (spec.tile.wm // 64) * 2 if rows == "tile" else 1
    strips = spec.tile.wn // 64
    channels = "".join(f" u32 evc{s}[{nrows}];" for s in epi.channel_args)
    pixels = "".join(
        f" u32 evp{s}[{nrows * strips * 8 * _pixel_words(spec, s)}];" for s in epi.pixel_args
    )
    return channels + " " * bool(channels), pixels + " " * bool(pixels)


def _early_loads(spec: ConvSpec, rows: str) -> str:
    """The body of ``load_tile`` or ``load_row``: filling the words of ``_early_arrays``
    (``c``: channel words, ``px``: pixel words; the output rows' ``kg``, ``ko`` are the
    method's, or its loop's).

    The loads are unconditional (no branch between them, so all are in flight before the
    first use): an element outside the output (ragged rows, strips, columns) reads element
    0 instead, a value the epilogue never uses. A misaligned 16-bit input (``wide`` false,
    uniform) takes a second copy of the loop with two 2-byte loads per pair."""
    epi = spec.epilogue
    tile = rows == "tile"
    strips = spec.tile.wn // 64
    b_col0 = "cw * WN" if spec.tile.split == "n" else "0"
    a_row0 = "cw * WM" if spec.tile.split == "m" else "0"
    ci = "m * 2 + h" if tile else "0"
    newline = "\n"
    fill = [
        f"c.evc{s}[{ci}] = fs_ldg_{'b32' if epi.extras[s] == 'f32' else 'u16'}("
        f"(const {_ctype(epi.extras[s])}*)e{s} + ko);"
        for s in epi.channel_args
    ]
    pi = f"(({ci}) * {strips} + sj) * 8 + qe"

    def pixel_loads(wide: bool) -> list[str]:
        lines = []
        for s in epi.pixel_args:
            ct = _ctype(epi.extras[s])
            if _pixel_words(spec, s) == 1:
                at = f"(const u16*)e{s} + (live ? o : 0)"
                if wide:
                    lines.append(f"px.evp{s}[{pi}] = fs_ldg_b32({at});")
                else:
                    hi = f"fs_ldg_u16({at} + (live ? 1 : 0))"
                    lines.append(f"px.evp{s}[{pi}] = fs_ldg_u16({at}) | ({hi} << 16);")
            else:
                ld = "fs_ldg_b32" if epi.extras[s] == "f32" else "fs_ldg_u16"
                at, step = ("on", "KOUT") if s in epi.pixel_nhwc else ("o", "1")
                base = f"{ld}((const {ct}*)e{s}"
                lines.append(f"px.evp{s}[2 * ({pi})] = {base} + (live ? {at} : 0));")
                lines.append(
                    f"px.evp{s}[2 * ({pi}) + 1] = "
                    f"{base} + (live && q + 1 < Q ? {at} + {step} : 0));"
                )
        return lines

    if tile:
        head = f"""#pragma unroll
for (int m = 0; m < {spec.tile.wm // 64}; ++m)
#pragma unroll
for (int h = 0; h < 2; ++h) {{
const int kg = pm * BM + {a_row0} + m * 64 + warp * 16 + (lane / 4) + 8 * h;
const bool krow = kg < KG;
const int ko = g * KG + (krow ? kg : 0);
"""
    else:
        head = "{\nconst bool krow = true;\n"

    nhwc_offset = f"\nconst long long on = {NHWC_OFFSET};" if epi.pixel_nhwc else ""

    def pixel_loop(wide: bool) -> str:
        return f"""#pragma unroll
for (int sj = 0; sj < WN / 64; ++sj) {{
const int strip = pn * SPT + ({b_col0}) / 64 + sj;
int n, p0, q0;
fusec::conv_strip<Config>(min(strip, STRIPS - 1), n, p0, q0);
const long long row = (((long long)n * KOUT + ko) * P + p0) * Q + q0;
#pragma unroll
for (int qe = 0; qe < 8; ++qe) {{
const int dq = qe * 8 % TW + 2 * (lane % 4);
const int p = p0 + qe * 8 / TW;
const int q = q0 + dq;
const long long o = row + (qe * 8 / TW) * Q + dq;{nhwc_offset}
const bool live = krow && strip < STRIPS && p < P && q < Q;
{newline.join(pixel_loads(wide))}
}}
}}"""

    pixels = ""
    if epi.pixel_args:
        if any(_pixel_words(spec, s) == 1 for s in epi.pixel_args):
            pixels = f"if (wide) {{\n{pixel_loop(True)}\n}} else {{\n{pixel_loop(False)}\n}}"
        else:
            pixels = pixel_loop(False)
    body = f"{head}{newline.join(fill)}\n{pixels}\n}}"
    lines = ["// the epilogue's inputs, loaded ahead of use", *body.splitlines()]
    return (
        "\n"
        + "".join(line + "\n" if line.startswith("#") else "    " + line + "\n" for line in lines)
        + "  "
    )


def _ctype(dtype: str) -> str:
    return "float" if dtype == "f32" else "u16"


def _call_args(spec: ConvSpec, second: bool) -> str:
    """``fs_epilogue``'s loaded arguments for the pair's first (or ``second``) element."""
    epi = spec.epilogue
    if not _early(spec):  # (``at``'s q is the element's own: q + 1 for the second)
        return _inline_args(epi, "ko", "o + 1" if second else "o", NHWC_OFFSET)
    tile = _early_placement(spec) == "tile"
    ci, channels, pixels = ("m * 2 + h", "tc.", "tp.") if tile else ("0", "rc.", "rp.")
    pi = f"(({ci}) * {spec.tile.wn // 64} + sj) * 8 + qe"
    args = [f"fs_{epi.extras[s]}_lo({channels}evc{s}[{ci}])" for s in epi.channel_args]
    for s in epi.pixel_args:
        dt = epi.extras[s]
        if _pixel_words(spec, s) == 1:
            args.append(f"fs_{dt}_{'hi' if second else 'lo'}({pixels}evp{s}[{pi}])")
        else:
            args.append(f"fs_{dt}_lo({pixels}evp{s}[2 * ({pi}){' + 1' if second else ''}])")
    return "".join(f", {a}" for a in args)


DIRECT_THREADS = 256
#: the NHWC depthwise kernel's shared memory per block at most (its input window and
#: weights): under the 48 KiB a block gets without opting in, several blocks an SM
DEPTHWISE_SMEM = 48 * 1024
#: the layouts of the direct template: NCHW/KCRS, or NHWC input and output (depthwise)
DIRECT_LAYOUTS = ("nchw", "nhwc")


def _fit(extent: int, largest: int = 8, smallest: int = 4) -> int:
    """The strip (or tile) length in ``smallest..largest`` covering ``extent`` with the
    fewest padded elements (the longer on ties), ``extent`` itself when it is shorter."""
    if extent <= largest:
        return extent
    return min(range(largest, smallest - 1, -1), key=lambda t: -(-extent // t) * t - extent)


@dataclass(frozen=True)
class DepthwiseTile:
    """A block's tile of the NHWC depthwise kernel (``conv_depthwise_nhwc.cuh``): ``tp`` x
    ``tq`` output pixels x ``cb`` channels; a thread computes ``cv`` channels x ``qt``
    pixels along a row."""

    tp: int
    tq: int
    qt: int
    cb: int
    cv: int

    @property
    def threads(self) -> int:
        return (self.cb // self.cv) * self.tp * (self.tq // self.qt)

    def window(self, geo: ConvGeometry) -> tuple[int, int]:
        """The input window (rows, columns) a tile reads."""
        ih = (self.tp - 1) * geo.stride_h + (geo.r - 1) * geo.dil_h + 1
        iw = (self.tq - 1) * geo.stride_w + (geo.s - 1) * geo.dil_w + 1
        return ih, iw

    def smem_bytes(self, geo: ConvGeometry) -> int:
        """The f32 weights and the 16-bit input window, its rows padded so that the strips
        of a warp read disjoint banks (``XPITCH`` of ``conv_depthwise_nhwc.cuh``)."""
        ih, iw = self.window(geo)
        lanes = self.cb // self.cv
        pad = 2 * ((lanes % 32 - (iw * lanes) % 32 + 32) % 32) if self.cv == 2 else 0
        return geo.r * geo.s * self.cb * 4 + ih * (iw * self.cb + pad) * 2

    def tiles(self, geo: ConvGeometry) -> int:
        return geo.n * cdiv(geo.p, self.tp) * cdiv(geo.q, self.tq) * cdiv(geo.c, self.cb)


def depthwise_tile(geo: ConvGeometry) -> DepthwiseTile:
    """The NHWC depthwise kernel's tile for ``geo``: channel pairs (``cv`` 2) when the
    channel count is even; 64 channels a block (32 when that divides the channels and 64
    does not: ConvNeXt's 96), rows and strips of 4 to 8 pixels that waste the least; the
    rows, then the channels halved until the shared memory fits ``DEPTHWISE_SMEM``."""
    cv = 2 if geo.c % 2 == 0 else 1
    if geo.c % 64 and not geo.c % 32:
        cb = 32
    else:
        cb = min(64, cdiv(geo.c, cv) * cv)
    qt = _fit(geo.q)
    tile = DepthwiseTile(_fit(geo.p), qt, qt, cb, cv)
    while tile.smem_bytes(geo) > DEPTHWISE_SMEM and (tile.tp > 1 or tile.cb > cv):
        if tile.tp > 1:
            tile = DepthwiseTile(tile.tp // 2, tile.tq, tile.qt, tile.cb, cv)
        else:
            tile = DepthwiseTile(tile.tp, tile.tq, tile.qt, max(cv, tile.cb // 2 // cv * cv), cv)
    return tile


@dataclass(frozen=True)
class DirectConvSpec(LinkedSpec):
    """A direct convolution (any groups, strides, padding, dilation), one output element
    per thread and grid-stride step: the template for depthwise and few-channel groups.
    ``layout`` "nhwc": a depthwise conv (one channel a group) reading and writing NHWC
    (the channels-last pass's groups), tiled through shared memory
    (``conv_depthwise_nhwc.cuh``, ``DepthwiseTile``)."""

    geo: ConvGeometry
    dtype: str = "f16"
    out_dtype: str = "f16"
    epilogue: Epilogue = field(default_factory=Epilogue)
    layout: str = "nchw"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES + ("f32",) or self.out_dtype not in OUT_DTYPES:
            raise ValueError(f"unsupported conv types {self.dtype} -> {self.out_dtype}")
        if self.layout not in DIRECT_LAYOUTS:
            raise ValueError(
                f"direct conv layout {self.layout!r}, expected one of {DIRECT_LAYOUTS}"
            )
        if self.layout == "nhwc":
            geo = self.geo
            if not (geo.groups == geo.c == geo.k and geo.cg == 1):
                raise ValueError("the NHWC direct conv is depthwise (one channel a group) only")
            if self.dtype not in DTYPES:
                raise ValueError(f"the NHWC direct conv reads f16 or bf16, not {self.dtype}")

    PREFIX = "dconv"

    @property
    def tile(self) -> DepthwiseTile | None:
        """The NHWC kernel's tile (None: the NCHW grid-stride kernel)."""
        return depthwise_tile(self.geo) if self.layout == "nhwc" else None

    @property
    def threads(self) -> int:
        tile = self.tile
        return DIRECT_THREADS if tile is None else tile.threads

    @property
    def smem_bytes(self) -> int:
        tile = self.tile
        return 0 if tile is None else tile.smem_bytes(self.geo)

    def cpp_source(self) -> str:
        return expand(generate_direct(self))

    def kernel_params(self) -> list[str]:
        """The kernel's (u64) parameters after the shared-memory address."""
        return ["x", "w", "out"] + [f"e{k}" for k in range(len(self.epilogue.extras))]

    def arg_count(self) -> tuple[int, int]:
        return len(self.kernel_params()), 0


def _direct_config(spec: DirectConvSpec) -> str:
    """``struct Config`` of ``fusec::conv_direct`` (or ``conv_depthwise_nhwc``: the tile
    too): the geometry and the element types."""
    tile = spec.tile
    extra = ""
    if tile is not None:
        values = [f"CH = {spec.geo.c}", f"TP = {tile.tp}", f"TQ = {tile.tq}"]
        values += [f"QT = {tile.qt}", f"CB = {tile.cb}", f"CV = {tile.cv}"]
        values.append(f"SMEM = {tile.smem_bytes(spec.geo)}")
        extra = f"""  enum : int {{
{enumerators(values)}
  }};
"""
    return f"""struct Config {{
  enum : int {{
{_geometry_enumerators(spec.geo)}
  }};
{extra}  using In = {ELEMENT_TYPES[spec.dtype]};
  using Out = {ELEMENT_TYPES[spec.out_dtype]};
}};
"""


def generate_direct(spec: DirectConvSpec) -> str:
    """The ``.cu`` source of ``spec`` as the template writes it: the kernel layer's
    ``conv_direct.cuh``, the epilogue function and functor, the ``Config`` (geometry and
    types) and the ``extern "C"`` wrapper."""
    n = len(spec.epilogue.extras)
    extras_args = "".join(f", (const void*)e{k}" for k in range(n))
    loaded_args = _inline_args(spec.epilogue, "ko", "idx")
    params = ", ".join(f"u64 {n}" for n in spec.kernel_params())
    members = "".join(f"  u64 e{k};\n" for k in range(n))
    nhwc = spec.layout == "nhwc"
    header = "conv_depthwise_nhwc" if nhwc else "conv_direct"
    call = (
        "fusec::conv_depthwise_nhwc<Config>(epi, x, w, out, smem_raw)"
        if nhwc
        else "fusec::conv_direct<Config>(epi, x, w, out)"
    )
    what = "depthwise conv2d, NHWC input and output" if nhwc else "direct conv2d"
    return f"""// fusec generated {what}, {spec.dtype} -> {spec.out_dtype}, f32 accumulation
// {_shape_comment(spec.geo)}
// epilogue {spec.epilogue.name}
{include(header)}
{_epilogue_function(spec.epilogue)}
struct Epilogue {{
{members}  __device__ __forceinline__ float operator()(float acc, int n, int ko, int p, int q,
                                             long long idx) const {{
    return fs_epilogue(acc, n, ko, p, q{extras_args}{loaded_args});
  }}
}};
{_direct_config(spec)}
extern "C" __device__ __attribute__((always_inline))
int {spec.function_name}(int* ret, u64 smem_raw, {params}) {{
  const Epilogue epi{{{", ".join(f"e{k}" for k in range(n))}}};
  return {call};
}}
"""
