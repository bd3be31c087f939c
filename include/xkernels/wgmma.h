// Hopper's warpgroup matrix multiply (wgmma, sm_90a): shared-memory matrix descriptors and
// wgmma.mma_async m64nNk16 (fp16, bf16) and m64nNk32 (e4m3) with fp32 accumulators in registers.
//
// A warpgroup (4 consecutive warps, the first a multiple of 4) issues each instruction together.
// D (64 x N, fp32) is spread as the mma.sync C layout of each warp's 16 rows: warp w of the group,
// lane (g = lane / 4, c = lane % 4) holds, for each n8 column block j, d[4j + 0..1] = rows 16w + g,
// columns 8j + 2c, +1, and d[4j + 2..3] = row 16w + g + 8, same columns.
//
// Operands A (64 x K) and B (N x K) are read from shared memory, K-major (K contiguous in each
// row), as laid out by a 128-byte-swizzled TMA box of 128-byte rows (tma.h): rows 128 bytes apart,
// the XOR pattern repeating every 8 rows (1024 bytes). A descriptor names the first row and the
// byte offset along K inside the 128-byte row; the tile must start 1024-byte aligned.
//
// Order: wgmma_fence() before the first mma of a batch (after the accumulators were last written
// by other instructions), commit() after the batch, wait<N>() before the accumulators are read or
// the shared memory is reused (N = batches allowed to stay in flight).
#ifndef XKERNELS_WGMMA_H_
#define XKERNELS_WGMMA_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"

namespace xkernels::wgmma {

// The descriptor of a K-major, 128-byte-swizzled operand starting at shared address `addr` (a row
// start plus a byte offset along K below 128): 8-row core groups 1024 bytes apart (stride byte
// offset), leading byte offset unused for this swizzle (1), swizzle mode 128 B (1 in bits 62-63).
XK_DEVICE uint64_t desc_sw128(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

XK_DEVICE void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
XK_DEVICE void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
XK_DEVICE void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Warp specialisation: a producer warpgroup gives registers back, consumers take them (all the
// warps of a warpgroup execute the same one).
template <int kRegs>
XK_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
XK_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
// Keeps the compiler from moving reads or writes of accumulator registers across the async
// instructions that own them.
template <int kN>
XK_DEVICE void fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- the instructions. The accumulators are operands of the asm statement, one by one:
// XK_WGMMA_REGS_n is the text "%0, %1, ..., %n-1" of n of them, XK_WGMMA_D_n their n "+f"(d[i])
// outputs; the descriptors, A's registers and the accumulate flag follow them.
#define XK_WGMMA_REGS_32                                                   \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "           \
  "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, " \
  "%28, %29, %30, %31"
#define XK_WGMMA_D_32                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define XK_WGMMA_REGS_64                                                   \
  XK_WGMMA_REGS_32                                                         \
  ", "                                                                     \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
  "%60, %61, %62, %63"
#define XK_WGMMA_D_64                                                                            \
  XK_WGMMA_D_32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),   \
      "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
      "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), \
      "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define XK_WGMMA_REGS_96                                                   \
  XK_WGMMA_REGS_64                                                         \
  ", "                                                                     \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, " \
  "%92, %93, %94, %95"
#define XK_WGMMA_D_96                                                                            \
  XK_WGMMA_D_64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),   \
      "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), \
      "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
      "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
      "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define XK_WGMMA_REGS_128                                                                \
  XK_WGMMA_REGS_96                                                                       \
  ", "                                                                                   \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "     \
  "%110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, " \
  "%124, %125, %126, %127"
#define XK_WGMMA_D_128                                                                           \
  XK_WGMMA_D_96, "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), \
      "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),        \
      "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),        \
      "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),        \
      "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),        \
      "+f"(d[126]), "+f"(d[127])

// clang-format off
// n 48, 80, 96, 112, 144 and 160 (the token side of the swapped tiles, gemm/sm90.h) and 176 (the
// key tiles of attention/sm90.h), whole lists
#define XK_WGMMA_REGS_24 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23"
#define XK_WGMMA_D_24 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define XK_WGMMA_REGS_40 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39"
#define XK_WGMMA_D_40 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define XK_WGMMA_REGS_48 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define XK_WGMMA_D_48 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define XK_WGMMA_REGS_56 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55"
#define XK_WGMMA_D_56 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define XK_WGMMA_REGS_72 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71"
#define XK_WGMMA_D_72 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define XK_WGMMA_REGS_80 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define XK_WGMMA_D_80 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define XK_WGMMA_REGS_88 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define XK_WGMMA_D_88 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
// clang-format on

// d (+)= A * B^T over one k step, A and B K-major shared-memory descriptors; accumulate = 0
// overwrites d. N accumulators; DA, DB, PRED: the numbers of the descriptors' and the flag's
// operands (N, N + 1, N + 2); IMM: the scale and transpose immediates (none to transpose in e4m3).
// clang-format off
#define XK_WGMMA_SS(NAME, N, SHAPE_TYPES, DA, DB, PRED, IMM)                                   \
  XK_DEVICE void NAME(float (&d)[N], uint64_t da, uint64_t db, uint32_t accumulate) {          \
    asm volatile("{\n.reg .pred p;\n"                                                          \
                 "setp.ne.b32 p, %" PRED ", 0;\n"                                              \
                 "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {" XK_WGMMA_REGS_##N "}, "       \
                 "%" DA ", %" DB ", p" IMM ";\n}\n"                                             \
                 : XK_WGMMA_D_##N                                                             \
                 : "l"(da), "l"(db), "r"(accumulate));                                        \
  }
// clang-format on
XK_WGMMA_SS(mma_m64n64k16_f16, 32, "m64n64k16.f32.f16.f16", "32", "33", "34", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n128k16_f16, 64, "m64n128k16.f32.f16.f16", "64", "65", "66", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n192k16_f16, 96, "m64n192k16.f32.f16.f16", "96", "97", "98", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n256k16_f16, 128, "m64n256k16.f32.f16.f16", "128", "129", "130", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n64k16_bf16, 32, "m64n64k16.f32.bf16.bf16", "32", "33", "34", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n128k16_bf16, 64, "m64n128k16.f32.bf16.bf16", "64", "65", "66", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n192k16_bf16, 96, "m64n192k16.f32.bf16.bf16", "96", "97", "98", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n256k16_bf16, 128, "m64n256k16.f32.bf16.bf16", "128", "129", "130",
            ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n48k16_f16, 24, "m64n48k16.f32.f16.f16", "24", "25", "26", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n48k16_bf16, 24, "m64n48k16.f32.bf16.bf16", "24", "25", "26", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n80k16_f16, 40, "m64n80k16.f32.f16.f16", "40", "41", "42", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n80k16_bf16, 40, "m64n80k16.f32.bf16.bf16", "40", "41", "42", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n96k16_f16, 48, "m64n96k16.f32.f16.f16", "48", "49", "50", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n96k16_bf16, 48, "m64n96k16.f32.bf16.bf16", "48", "49", "50", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n144k16_f16, 72, "m64n144k16.f32.f16.f16", "72", "73", "74", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n144k16_bf16, 72, "m64n144k16.f32.bf16.bf16", "72", "73", "74", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n112k16_f16, 56, "m64n112k16.f32.f16.f16", "56", "57", "58", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n112k16_bf16, 56, "m64n112k16.f32.bf16.bf16", "56", "57", "58", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n160k16_f16, 80, "m64n160k16.f32.f16.f16", "80", "81", "82", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n160k16_bf16, 80, "m64n160k16.f32.bf16.bf16", "80", "81", "82", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n176k16_f16, 88, "m64n176k16.f32.f16.f16", "88", "89", "90", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n176k16_bf16, 88, "m64n176k16.f32.bf16.bf16", "88", "89", "90", ", 1, 1, 0, 0")
XK_WGMMA_SS(mma_m64n64k32_e4m3, 32, "m64n64k32.f32.e4m3.e4m3", "32", "33", "34", ", 1, 1")
XK_WGMMA_SS(mma_m64n128k32_e4m3, 64, "m64n128k32.f32.e4m3.e4m3", "64", "65", "66", ", 1, 1")
XK_WGMMA_SS(mma_m64n48k32_e4m3, 24, "m64n48k32.f32.e4m3.e4m3", "24", "25", "26", ", 1, 1")
XK_WGMMA_SS(mma_m64n80k32_e4m3, 40, "m64n80k32.f32.e4m3.e4m3", "40", "41", "42", ", 1, 1")
XK_WGMMA_SS(mma_m64n96k32_e4m3, 48, "m64n96k32.f32.e4m3.e4m3", "48", "49", "50", ", 1, 1")
XK_WGMMA_SS(mma_m64n112k32_e4m3, 56, "m64n112k32.f32.e4m3.e4m3", "56", "57", "58", ", 1, 1")
XK_WGMMA_SS(mma_m64n144k32_e4m3, 72, "m64n144k32.f32.e4m3.e4m3", "72", "73", "74", ", 1, 1")
XK_WGMMA_SS(mma_m64n160k32_e4m3, 80, "m64n160k32.f32.e4m3.e4m3", "80", "81", "82", ", 1, 1")
XK_WGMMA_SS(mma_m64n192k32_e4m3, 96, "m64n192k32.f32.e4m3.e4m3", "96", "97", "98", ", 1, 1")
XK_WGMMA_SS(mma_m64n256k32_e4m3, 128, "m64n256k32.f32.e4m3.e4m3", "128", "129", "130", ", 1, 1")
#undef XK_WGMMA_SS

// d (+)= A B^T over one k step of T (16 values of 16-bit T, 32 of e4m3), N columns.
template <int kN, typename T>
XK_DEVICE void mma(float (&d)[kN / 2], uint64_t da, uint64_t db, uint32_t accumulate) {
  static_assert(kN == 64 || kN == 128 || kN == 256 || kN == 48 || kN == 80 || kN == 96 ||
                    kN == 112 || kN == 144 || kN == 160 || kN == 192 ||
                    (kN == 176 && sizeof(T) == 2),
                "n of 48, 64, 80, 96, 112, 128, 144, 160, 192 or 256 (16-bit operands also 176)");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (kN == 48) mma_m64n48k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 64) mma_m64n64k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 80) mma_m64n80k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 96) mma_m64n96k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 128) mma_m64n128k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 112) mma_m64n112k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 144) mma_m64n144k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 160) mma_m64n160k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 176) mma_m64n176k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 192) mma_m64n192k16_bf16(d, da, db, accumulate);
    if constexpr (kN == 256) mma_m64n256k16_bf16(d, da, db, accumulate);
  } else if constexpr (std::is_same_v<T, __half>) {
    if constexpr (kN == 48) mma_m64n48k16_f16(d, da, db, accumulate);
    if constexpr (kN == 64) mma_m64n64k16_f16(d, da, db, accumulate);
    if constexpr (kN == 80) mma_m64n80k16_f16(d, da, db, accumulate);
    if constexpr (kN == 96) mma_m64n96k16_f16(d, da, db, accumulate);
    if constexpr (kN == 128) mma_m64n128k16_f16(d, da, db, accumulate);
    if constexpr (kN == 112) mma_m64n112k16_f16(d, da, db, accumulate);
    if constexpr (kN == 144) mma_m64n144k16_f16(d, da, db, accumulate);
    if constexpr (kN == 160) mma_m64n160k16_f16(d, da, db, accumulate);
    if constexpr (kN == 176) mma_m64n176k16_f16(d, da, db, accumulate);
    if constexpr (kN == 192) mma_m64n192k16_f16(d, da, db, accumulate);
    if constexpr (kN == 256) mma_m64n256k16_f16(d, da, db, accumulate);
  } else {
    static_assert(std::is_same_v<T, __nv_fp8_e4m3>, "fp16, bf16 or e4m3 operands");
    if constexpr (kN == 48) mma_m64n48k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 64) mma_m64n64k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 80) mma_m64n80k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 96) mma_m64n96k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 112) mma_m64n112k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 128) mma_m64n128k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 144) mma_m64n144k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 160) mma_m64n160k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 192) mma_m64n192k32_e4m3(d, da, db, accumulate);
    if constexpr (kN == 256) mma_m64n256k32_e4m3(d, da, db, accumulate);
  }
}

// The descriptor of an MN-major (N contiguous: a [k][n] tile, transposed B), 128-byte-swizzled
// operand at `addr`: rows of 128 bytes (64 16-bit values of n) along k, 8-row groups 1024 bytes
// apart (stride byte offset), the next 64 values of n `n_chunk_bytes` further (leading byte
// offset).
XK_DEVICE uint64_t desc_sw128_mn(uint32_t addr, uint32_t n_chunk_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((n_chunk_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

// Keeps the compiler from reusing A-fragment registers while an async instruction reads them.
template <int kN>
XK_DEVICE void fence_operands(uint32_t (&a)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(a[i])::"memory");
}
// ---- A from registers (the mma.sync m16n8k16 A layout of each warp's 16 rows), B an MN-major
// descriptor (imm-trans-b = 1): d (+)= A * B over one k step of 16. A0: the number of A's first
// register operand (N), DB and PRED those of the descriptor and the flag (N + 4, N + 5).
// clang-format off
#define XK_WGMMA_RS_TB(NAME, N, SHAPE_TYPES, A0, A1, A2, A3, DB, PRED)                          \
  XK_DEVICE void NAME(float (&d)[N], const uint32_t (&a)[4], uint64_t db,                       \
                      uint32_t accumulate) {                                                    \
    asm volatile("{\n.reg .pred p;\n"                                                           \
                 "setp.ne.b32 p, %" PRED ", 0;\n"                                               \
                 "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {" XK_WGMMA_REGS_##N "}, "        \
                 "{%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" DB ", p, 1, 1, 1;\n}\n"               \
                 : XK_WGMMA_D_##N                                                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));      \
  }
// clang-format on
XK_WGMMA_RS_TB(mma_rs_m64n64k16_bf16_tb, 32, "m64n64k16.f32.bf16.bf16", "32", "33", "34", "35",
               "36", "37")
XK_WGMMA_RS_TB(mma_rs_m64n128k16_bf16_tb, 64, "m64n128k16.f32.bf16.bf16", "64", "65", "66", "67",
               "68", "69")
XK_WGMMA_RS_TB(mma_rs_m64n64k16_f16_tb, 32, "m64n64k16.f32.f16.f16", "32", "33", "34", "35", "36",
               "37")
XK_WGMMA_RS_TB(mma_rs_m64n128k16_f16_tb, 64, "m64n128k16.f32.f16.f16", "64", "65", "66", "67", "68",
               "69")
#undef XK_WGMMA_RS_TB
// d (+)= A B over one k step of 16 (A in registers, B MN-major), kN columns of 16-bit T;
// accumulate = 0 overwrites d.
template <int kN, typename T>
XK_DEVICE void mma_rs_tb(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t db,
                         uint32_t accumulate) {
  static_assert(kN == 64 || kN == 128, "n of 64 or 128");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (kN == 64) mma_rs_m64n64k16_bf16_tb(d, a, db, accumulate);
    if constexpr (kN == 128) mma_rs_m64n128k16_bf16_tb(d, a, db, accumulate);
  } else {
    static_assert(std::is_same_v<T, __half>, "fp16 or bf16 operands");
    if constexpr (kN == 64) mma_rs_m64n64k16_f16_tb(d, a, db, accumulate);
    if constexpr (kN == 128) mma_rs_m64n128k16_f16_tb(d, a, db, accumulate);
  }
}

// Values of T along k per instruction.
template <typename T>
constexpr int kK = sizeof(T) == 1 ? 32 : 16;

}  // namespace xkernels::wgmma

#undef XK_WGMMA_REGS_32
#undef XK_WGMMA_REGS_64
#undef XK_WGMMA_REGS_96
#undef XK_WGMMA_REGS_128
#undef XK_WGMMA_D_32
#undef XK_WGMMA_D_64
#undef XK_WGMMA_D_96
#undef XK_WGMMA_D_128

#endif  // XKERNELS_WGMMA_H_
