// The sm90 GEMM dispatcher's choice on the host (test_gemm.py builds and runs this with nvcc; no
// GPU): for each line "m n k" on stdin (bf16 inputs and output, b as [n, k], not gated; "m n k
// e4m3": e4m3 inputs with row-wise scales, bf16 output), the kernel gemm::Choose takes on an
// H100's 132 SMs and its tile (TileDims: output rows x columns), and SwapHalfPlan's split where
// it takes the one-group swapped tiles (PairSplits' where it takes the 64-row tiles for m > 64),
// as "name bm bn splits"; "gemv-bulk 8 <rows of b in a group> 1" for shapes of the bulk-copy GEMV
// (gemv.h).
// So the GPU tests can say which tile each of their shapes reaches, and fail when a rule moves it.
#include <cstdio>
#include <string>

#include "xkernels/gemm/gemm.h"

using namespace xkernels::gemm;

const char* Name(Kernel k) {
  switch (k) {
    case Kernel::kSm80Large: return "sm80-large";
    case Kernel::kSm80Mid: return "sm80-mid";
    case Kernel::kSm80Small: return "sm80-small";
    case Kernel::kSm90Large: return "large";
    case Kernel::kSm90Mid: return "mid";
    case Kernel::kSm90Small: return "small";
    case Kernel::kSm90Wide192: return "wide192";
    case Kernel::kSm90Slim: return "slim";
    case Kernel::kSm90Swap192: return "swap192";
    case Kernel::kSm90SwapSized: return "swap-sized";
    case Kernel::kSm90SwapHalf: return "swap-half";
    case Kernel::kSm90Wide144: return "wide144";
    case Kernel::kSm90Narrow: return "narrow";
    case Kernel::kSm90SwapOne: return "swap-one";
  }
  return "?";
}

int main() {
  constexpr int kSms = 132;
  char line[128], type[8];
  while (fgets(line, sizeof line, stdin) != nullptr) {
    int m, n, k;
    type[0] = 0;
    if (sscanf(line, "%d %d %d %7s", &m, &n, &k, type) < 3) continue;
    Params p;
    p.m = m, p.n = n, p.k = k;
    p.in_type = p.out_type = Elem::kBF16;
    if (std::string(type) == "e4m3") {
      p.in_type = Elem::kE4M3;
      p.a_scale_kind = p.b_scale_kind = Scale::kRow;
    }
    if (UseGemvBulk(p, 9, kSms)) {  // (not one of Choose's tiles: rows of a, rows of b a group)
      printf("gemv-bulk %d %d 1\n", kGemvBulkMaxRows, 16 * GemvBulkTiles(p.m));
      continue;
    }
    const Kernel kernel = Choose(p, 9, kSms);
    int bm = 0, bn = 0;
    TileDims(p, kernel, kSms, &bm, &bn);
    int splits = 1;
    if (kernel == Kernel::kSm90SwapHalf) splits = SwapHalfPlan(p, kSms).splits;
    if (kernel == Kernel::kSm90Small && p.m > 64) splits = PairSplits(p, kSms);
    printf("%s %d %d %d\n", Name(kernel), bm, bn, splits);
  }
  return 0;
}
