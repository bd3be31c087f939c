// Tensor-core primitives for sm_80+: ldmatrix (x1/x2/x4, transposed) and mma.sync.m16n8k16 with
// fp16 or bf16 operands and fp32 accumulators, plus the fragment conversions around them.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, c = lane % 4; each register holds two 16-bit
// values, the lower column first):
//   A (16 x 16, row major): a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..), a3 (g+8, 2c+8..)
//   B (16 x 8, k x n):      b0 (k 2c..2c+1, n g), b1 (k 2c+8.., n g)
//   C, D (16 x 8, fp32):    c0, c1 (g, 2c), (g, 2c+1); c2, c3 (g+8, 2c), (g+8, 2c+1)
// ldmatrix.x4 gives lane l the (l / 4, 2 (l % 4)..) pair of each of four 8 x 8 matrices whose row
// addresses lanes 8i .. 8i+7 supply: in A's order (rows 0-7 | 8-15) x (k 0-7 | 8-15) that is an A
// fragment; over rows of K stored [n][k] it is B (k contiguous per n); .trans over rows of V
// stored [k][n] gives B too.
#ifndef XKERNELS_MMA_H_
#define XKERNELS_MMA_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"

namespace xkernels::mma {

XK_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 matrices of 16-bit values; lane l supplies the address of row l % 8 of matrix l / 8.
XK_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
XK_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Two matrices (lanes 0-15 supply the addresses) and one (lanes 0-7).
XK_DEVICE void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
XK_DEVICE void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
XK_DEVICE void ldmatrix_x1(uint32_t& r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(addr));
}
XK_DEVICE void ldmatrix_x1_trans(uint32_t& r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(addr));
}

// d += a * b on one m16n8k16 tile, T = __half or __nv_bfloat16, fp32 accumulators.
template <typename T>
XK_DEVICE void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// d = C + the row sums of the A fragment a, as a times a 16 x 8 B of ones: rows g and g + 8 in
// d[0] and d[2] (d[1], d[3] the same sums, never read). kFirst: C = {c0, c0, c2, c2}; else C = d,
// a chain in place over a tile's k steps (no zero registers for C; from c0, c2 = the running sums
// the additions come in the same order as one mma per step into them). The row sums of a
// softmax's P on the tensor cores, of the 16-bit P that the P V product uses.
template <typename T, bool kFirst>
XK_DEVICE void rowsum_m16k16(float (&d)[4], const uint32_t (&a)[4], float c0, float c2) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr uint32_t kOnes = kBf16 ? 0x3F803F80u : 0x3C003C00u;
#define XK_ROWSUM_MMA(TY, C)                                               \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY          \
               ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %8}, " C ";" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(kOnes), "f"(c0), "f"(c2))
  if constexpr (kFirst && kBf16) {
    XK_ROWSUM_MMA("bf16", "{%9, %9, %10, %10}");
  } else if constexpr (kFirst) {
    XK_ROWSUM_MMA("f16", "{%9, %9, %10, %10}");
  } else if constexpr (kBf16) {
    XK_ROWSUM_MMA("bf16", "{%0, %1, %2, %3}");
  } else {
    XK_ROWSUM_MMA("f16", "{%0, %1, %2, %3}");
  }
#undef XK_ROWSUM_MMA
}

// Two floats as one register of two 16-bit values (x in the lower half), rounded to nearest.
template <typename T>
XK_DEVICE uint32_t pack2(float x, float y) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The A fragment (16 rows x 16 k) of two C tiles side by side (k 0-7 from `lo`, 8-15 from `hi`):
// the accumulator layout of a row's two n8 tiles is the A layout of that row's 16 k, so P = S
// turns into the next product's A operand in registers.
template <typename T>
XK_DEVICE void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]);
  a[1] = pack2<T>(lo[2], lo[3]);
  a[2] = pack2<T>(hi[0], hi[1]);
  a[3] = pack2<T>(hi[2], hi[3]);
}

}  // namespace xkernels::mma

#endif  // XKERNELS_MMA_H_
