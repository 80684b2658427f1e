// fusec kernel layer: the types, 16-bit conversions, global loads and stores that every
// generated CUDA C++ kernel uses. NVRTC has no C++ standard library: the conversions are
// inline PTX, the integer types plain typedefs.
#pragma once

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define L2E 1.4426950408889634f  // log2(e)

static __device__ __forceinline__ float fs_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// silu(g) * u in f32 (a SwiGLU's pair: an MoE expert's gate and up values); 0 where the gate
// is -inf or so negative that exp(-g) overflows.
static __device__ __forceinline__ float fs_silu_mul(float g, float u) {
  return g < -88.0f ? 0.0f : __fdividef(g, 1.0f + __expf(-g)) * u;
}

// The shared-memory address (state space offset) of a generic pointer into shared memory.
static __device__ __forceinline__ u32 fs_smem(const void* p) {
  return (u32)__cvta_generic_to_shared(p);
}

// Programmatic dependent launch (``fusec.targets.cuda.dependent``): waits until the kernels
// this one depends on have completed and their writes are visible (at once when it was not
// launched as a dependent), then lets the kernel after it launch. A kernel's wrapper calls
// it first; a kernel that calls it itself (a GEMM loading its constant weights early) must
// touch no memory another kernel writes before it.
static __device__ __forceinline__ void fs_grid_dependency_wait() {
  asm volatile("griddepcontrol.wait; griddepcontrol.launch_dependents;" ::: "memory");
}

static __device__ __forceinline__ void fs_prefetch_l2(u64 p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// The low 16 bits of h as a float, and a float's 16-bit bits (rounded to nearest even).
static __device__ __forceinline__ float fs_cvt_f16(u32 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((u16)h));
  return f;
}
static __device__ __forceinline__ float fs_cvt_bf16(u32 h) { return __uint_as_float(h << 16); }
static __device__ __forceinline__ u16 fs_bits_f16(float v) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
static __device__ __forceinline__ u16 fs_bits_bf16(float v) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}

// Element i of a global array of f32, f16 or bf16, as a float (read-only cache).
static __device__ __forceinline__ float fs_ld_f32(const void* p, long long i) {
  return __ldg((const float*)p + i);
}
static __device__ __forceinline__ float fs_ld_f16(const void* p, long long i) {
  u16 h = __ldg((const unsigned short*)p + i);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
static __device__ __forceinline__ float fs_ld_bf16(const void* p, long long i) {
  u32 h = __ldg((const unsigned short*)p + i);
  return __uint_as_float(h << 16);
}

// Two floats rounded to a pair of 16-bit values in one word, lo in the low half.
static __device__ __forceinline__ u32 fs_pack_f16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
static __device__ __forceinline__ u32 fs_pack_bf16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The word's two 16-bit values as floats.
static __device__ __forceinline__ void fs_unpack_f16(u32 w, float& lo, float& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}"
      : "=f"(lo), "=f"(hi)
      : "r"(w));
}
static __device__ __forceinline__ void fs_unpack_bf16(u32 w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xFFFF0000u);
}

// v rounded to the type, as a float (what a store and a load of it give).
static __device__ __forceinline__ float fs_to_f32(float v) { return v; }
static __device__ __forceinline__ float fs_to_f16(float v) {
  unsigned short h;
  float y;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  asm("cvt.f32.f16 %0, %1;" : "=f"(y) : "h"(h));
  return y;
}
static __device__ __forceinline__ float fs_to_bf16(float v) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return __uint_as_float(((u32)h) << 16);
}

// Element i (st) or elements i, i + 1 (st2: one 8- or 4-byte store, i even) of a global
// array of the type.
static __device__ __forceinline__ void fs_st_f32(void* p, long long i, float v) {
  ((float*)p)[i] = v;
}
static __device__ __forceinline__ void fs_st2_f32(void* p, long long i, float a, float b) {
  *(float2*)((float*)p + i) = make_float2(a, b);
}
static __device__ __forceinline__ void fs_st_f16(void* p, long long i, float v) {
  ((u16*)p)[i] = (u16)(fs_pack_f16(v, 0.0f) & 0xFFFF);
}
static __device__ __forceinline__ void fs_st2_f16(void* p, long long i, float a, float b) {
  *(u32*)((u16*)p + i) = fs_pack_f16(a, b);
}
static __device__ __forceinline__ void fs_st_bf16(void* p, long long i, float v) {
  ((u16*)p)[i] = (u16)(fs_pack_bf16(v, 0.0f) & 0xFFFF);
}
static __device__ __forceinline__ void fs_st2_bf16(void* p, long long i, float a, float b) {
  *(u32*)((u16*)p + i) = fs_pack_bf16(a, b);
}

// A float4 from global memory through L2 only (ld.global.cg): for data that another SM
// wrote during this kernel (split-K's partial sums), which this SM's L1 may hold stale.
static __device__ __forceinline__ float4 fs_ld_cg4f(const float4* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

namespace fusec {

// The element types of operands, epilogue inputs and outputs, for templates: a load as a
// float, stores of one and of two adjacent elements, rounding to the type, and (16-bit
// types) packing and unpacking a pair in one word, a value from its bits and its bits.
// The members forward to the type's free functions (fs_ld_<T>, fs_st_<T>, ..., which the
// generated code calls too): one member list for the three types, one more for the two
// 16-bit ones.
#define FS_ELEMENT_MEMBERS(T)                                                                      \
  static __device__ __forceinline__ float ld(const void* p, long long i) {                         \
    return fs_ld_##T(p, i);                                                                        \
  }                                                                                                \
  static __device__ __forceinline__ void st(void* p, long long i, float v) { fs_st_##T(p, i, v); } \
  static __device__ __forceinline__ void st2(void* p, long long i, float a, float b) {             \
    fs_st2_##T(p, i, a, b);                                                                        \
  }                                                                                                \
  static __device__ __forceinline__ float to(float v) { return fs_to_##T(v); }
#define FS_HALF_MEMBERS(T)                                                                       \
  static __device__ __forceinline__ u32 pack(float lo, float hi) { return fs_pack_##T(lo, hi); } \
  static __device__ __forceinline__ void unpack(u32 w, float& lo, float& hi) {                   \
    fs_unpack_##T(w, lo, hi);                                                                    \
  }                                                                                              \
  static __device__ __forceinline__ float cvt(u32 h) { return fs_cvt_##T(h); }                   \
  static __device__ __forceinline__ u16 bits(float v) { return fs_bits_##T(v); }

struct F32 {
  enum : int { BYTES = 4, IS_BF16 = 0 };
  FS_ELEMENT_MEMBERS(f32)
};
struct F16 {
  enum : int { BYTES = 2, IS_BF16 = 0 };
  FS_ELEMENT_MEMBERS(f16)
  FS_HALF_MEMBERS(f16)
};
struct BF16 {
  enum : int { BYTES = 2, IS_BF16 = 1 };
  FS_ELEMENT_MEMBERS(bf16)
  FS_HALF_MEMBERS(bf16)
};

// The float8 element types (issue 31; e4m3, or e5m2 with E5M2_): operands of the fp8 GEMM
// (wgmma reads the codes), and as outputs a saturating store (cvt.rn.satfinite).
template <bool E5M2_>
struct Float8 {
  enum : int { BYTES = 1, IS_BF16 = 0 };
  static constexpr bool IS_E5M2 = E5M2_;
  static __device__ __forceinline__ u16 pack(float lo, float hi) {
    u16 r;
    if constexpr (E5M2_)
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %2, %1;" : "=h"(r) : "f"(lo), "f"(hi));
    else
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(r) : "f"(lo), "f"(hi));
    return r;
  }
  // a code's value (every float8 value is an f16 one: exact)
  static __device__ __forceinline__ float ld(const void* p, long long i) {
    const u16 code = ((const unsigned char*)p)[i];
    u32 h2;
    if constexpr (E5M2_)
      asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(code));
    else
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(code));
    return fs_cvt_f16(h2 & 0xFFFFu);
  }
  static __device__ __forceinline__ void st(void* p, long long i, float v) {
    ((unsigned char*)p)[i] = (unsigned char)(pack(v, 0.0f) & 0xFF);
  }
  static __device__ __forceinline__ void st2(void* p, long long i, float a, float b) {
    *(u16*)((unsigned char*)p + i) = pack(a, b);
  }
};
using E4M3 = Float8<false>;
using E5M2 = Float8<true>;

#undef FS_ELEMENT_MEMBERS
#undef FS_HALF_MEMBERS

}  // namespace fusec
