"""The light kernels of the cuda experts layer (``include/fusec/moe.cuh``): routing, the
gather of x's rows, the SwiGLU between the grouped GEMMs and the combine of the K slots,
each a linked device function built like the GEMM's auxiliary kernels (``build.build``)."""

from __future__ import annotations

from dataclasses import dataclass

from fusec.targets.cuda.headers import ELEMENT_TYPES, expand, include
from fusec.targets.cuda.linked import LinkedSpec

#: the route kernel is one block of this many threads; the others grid-stride in blocks of
#: ``THREADS``
ROUTE_THREADS = 1024
THREADS = 256
#: experts the route kernel's shared counters hold at most (3 ints an expert)
MAX_EXPERTS = 1024
#: (u64, int32) parameters of each stage's kernel, after the shared-memory address
_ARGS = {
    "route": (6, 3),  # experts, weights, groups, pair_row, row_token, row_weight; P, K, rows
    "gather": (4, 2),  # x, row_token, groups, xs; rows, D
    "swiglu": (3, 2),  # g, groups, h; rows, F
    "combine": (3, 3),  # y, pair_row, out; T, K, D
}
_CALLS = {
    "route": (
        "u64 experts, u64 weights, u64 groups, u64 pair_row, u64 row_token, u64 row_weight, "
        "int P, int K, int rows_max",
        "experts, weights, groups, pair_row, row_token, row_weight, P, K, rows_max",
    ),
    "gather": (
        "u64 x, u64 row_token, u64 groups, u64 xs, int rows_max, int D",
        "x, row_token, groups, xs, rows_max, D",
    ),  # fmt: skip
    "swiglu": ("u64 g, u64 groups, u64 h, int rows_max, int F", "g, groups, h, rows_max, F"),
    "combine": ("u64 y, u64 pair_row, u64 out, int T, int K, int D", "y, pair_row, out, T, K, D"),
}


@dataclass(frozen=True)
class MoeKernelSpec(LinkedSpec):
    """One light kernel of the experts layer: ``stage`` (route, gather, swiglu, combine),
    x's type ``dtype`` (f16 or bf16), the routing weights' ``weight_dtype``, the expert
    indices' bytes, the expert count and the GEMMs' row tile ``bm``."""

    stage: str
    dtype: str
    weight_dtype: str = "f32"
    index_bytes: int = 8
    experts: int = 8
    bm: int = 128

    def __post_init__(self) -> None:
        if self.stage not in _ARGS:
            raise ValueError(f"MoE kernel stage {self.stage!r}")
        if self.dtype not in ("f16", "bf16") or self.weight_dtype not in ("f16", "bf16", "f32"):
            raise ValueError(f"MoE kernel types {self.dtype}, weights {self.weight_dtype}")
        if self.index_bytes not in (4, 8) or not 1 <= self.experts <= MAX_EXPERTS:
            raise ValueError("expert indices of 4 or 8 bytes, 1 to 1024 experts")
        if self.bm not in (64, 128):
            raise ValueError("row tiles of 64 or 128 rows")

    PREFIX = "moe"

    @property
    def threads(self) -> int:
        return ROUTE_THREADS if self.stage == "route" else THREADS

    def arg_count(self) -> tuple[int, int]:
        return _ARGS[self.stage]

    def cpp_source(self) -> str:
        return expand(self.generate())

    def generate(self) -> str:
        """The C++ as the template writes it: ``moe.cuh``, the ``Config`` and the wrapper."""
        ints = {
            "THREADS": self.threads, "BM": self.bm, "E": self.experts,
            "INDEX_BYTES": self.index_bytes, "VEC": 8,
        }  # fmt: skip
        enumerators = ", ".join(f"{k} = {v}" for k, v in ints.items())
        params, args = _CALLS[self.stage]
        config = f"Moe{self.stage.capitalize()}Config"  # one name a stage: stages link apart
        return f"""// fusec generated MoE {self.stage} kernel ({self.dtype}, weights {
            self.weight_dtype
        }, {self.experts} experts, {8 * self.index_bytes}-bit indices, row tile {self.bm})
{include("moe")}
struct {config} {{
  enum : int {{ {enumerators} }};
  using In = {ELEMENT_TYPES[self.dtype]};
  using Weight = {ELEMENT_TYPES[self.weight_dtype]};
}};

extern "C" __device__ __attribute__((always_inline)) int {self.function_name}(
    int* ret, u64 smem, {params}) {{
  return fusec::moe_{self.stage}<{config}>({args});
}}
"""
