// Same-process A/B timing of GEMM versions (include/xkernels/gemm/): for each shape, every variant
// in turn, 9 rounds of CUDA events around a run of calls, the variants' order rotating by round so
// that clock and power drift falls on all of them alike; medians, and each variant's time over the
// first's. How the stream-K rule and the block-scale turns were measured (benchmarks/README.md,
// GEMM kernel versions). Variants: "dp" whole tiles only (no workspace), "sk" as dispatched, then
// tile variants called directly; each variant's output (NaN-poisoned before) against the first's,
// the largest |x - y| / (|y| + 1) printed as d. AB_SET=fp8: the e4m3 shapes only; AB_SET=mid /
// mid8: bf16 / e4m3 row-wise at mid-sized m against the dispatch before the sized swapped tiles
// ("old") and cuBLAS (bf16), with the call as the adapters make it ("lib": PlanSplits' split; "dp"
// and "sk" are unsplit); mid2: n of 24-56 weight tiles, where SwapSizedN does not take the sized
// tiles, with them forced ("swN"); fp8t: e4m3 per-tensor and per-row tiles of 128 x 128-192
// (cuBLASLt's shapes) against the dispatch's 128 x 256; AB_ONLY=m,n,k: that shape only;
// AB_SCALE=tensor / row / block: those e4m3 shapes only; AB_ROT=1: each timed call on the next of
// several copies of b (150 MB or more in all, so that the weights come from memory); gap: bf16
// shapes of m 160-384 where cuBLAS led by 15-50% (2026-11-28), every 16-bit tile forced (splits
// 1-4, sized swapped a-tiles, the one-group swapped tiles "h<rows>"); gap2 / gap3: m 136-1024 /
// 96-128 over n 1024-8192, the one-group swapped tiles at each size whose grid fits one round (and
// split in two) and plain 128 x n tiles "w<n>" (n 96-192) against the dispatch and cuBLAS; gap8:
// e4m3 row-wise at m 96-512, the one-group swapped tiles forced; gap6: n 4608-28672, the plain 128
// x n tiles also in clusters of 2 ("wa<n>" sharing a's tile, "wb<n>" sharing b's); gap7: shapes
// whose 128 x 144 grid is one round of 97-100% of 132 SMs ("w144s6": 6 stages, as gemm.h's
// Sm90Wide144); blk: e4m3 block scales at five shapes, the 128 x 256 tiles ("b256") beside the
// dispatch (how the rescaled loop's vote along k was measured, 2026-11-28, with its variants as
// template knobs); gap9: the decode layer's four GEMMs (Llama 3 8B) at m 64 / 128 / 256, the plain
// 128 x n tiles at any round count ("w<n>"), in clusters ("wa<n>", "wb<n>"), and the dispatch's
// named tiles forced; gap10: gap9's losses to cuBLAS with gap's variants added (splits 1-4, the
// sized swapped tiles); gap11: decode shapes with narrower plain tiles (128 x 48), one-group
// 64 x n tiles split 1-4 ("s<n>/<splits>") and swapped one-group tiles unclustered ("u<n>");
// gap12: gap11's tiles at m 96 and 128 over 11 weight shapes (how gemm.h's NarrowN and PairSplits
// were fitted; "lib" is the dispatch of the tree it is built from); gap14: the leads gap12 left
// (the unclustered swapped one-group tiles "u<n>" at m 112-128; 128 x 128 tiles split in two,
// "mid/2", at m 192-256); gap16: the "u<n>" tiles at m 100 and 128 over 14 weight shapes; gap17:
// m 8-128 with the TMA boxes past a's end ("long") against the short ones the dispatch takes, and
// the plain 128 x 48 / 64 / 96 tiles ("w<n>", short boxes) at every m; gap18: m 8-64 on the
// swapped one-group tiles of 48 and 64 rows of a ("u48", "u64"); mg: m 1-64 over five weight
// shapes on the bulk-copy GEMV (gemv.h) in several forms ("b<kA>k<kKC>"), the sm90 tiles
// ("tiles") and cuBLAS; AB_DUMP=1: the first mismatches of a variant whose d passes 1e-2.
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I include \
//       benchmarks/gemm_ab.cu -o /tmp/gemm_ab -lcuda && /tmp/gemm_ab
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "probe.h"
#include "xkernels/gemm/gemm.h"
using namespace xkernels;
using gemm::Elem;
using gemm::Params;
using gemm::Scale;
// bytes of small finite values (a bf16's high byte or an e4m3), from ProbeHash
__global__ void FillB(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t h = ProbeHash(seed, i);
    p[i] = static_cast<uint8_t>((h & 0x3f) | ((h >> 8) & 0x80));
  }
}
__global__ void FillF(float* p, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    p[i] = 0.01f + 1e-6f * (i % 97);
}
// max over i of |x - y| / (|y| + 1), as the bits of a non-negative float
__global__ void MaxDiff(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, unsigned* r) {
  float d = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
    d = fmaxf(d, a == b ? 0.f : fabsf(a - b) / (fabsf(b) + 1.f));
    if (a != a) d = 1e30f;
  }
  atomicMax(r, __float_as_uint(d));
}
using L = std::function<cudaError_t(Params)>;
// A tile variant called directly, with the workspace and stream-K as dispatched (or split-K into
// `splits`), bf16 out.
template <class Tl>
L Direct(float* ws, const DeviceProps& props, int splits = 1) {
  return [ws, &props, splits](Params q) {
    q.workspace = ws;
    q.splits = splits;
    q.stream_k = splits == 1;
    return gemm::LaunchSm90<Tl, __nv_bfloat16>(q, 0, props);
  };
}
// cuBLAS's bf16 GEMM (cublasGemmEx, found by dlopen so that the probe builds without its headers;
// the enum values are cuBLAS's: OP_N 0, OP_T 1, CUDA_R_16BF 14, COMPUTE_32F 68, GEMM_DEFAULT -1).
struct Cublas {
  using Create = int (*)(void**);
  using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);
  void* handle = nullptr;
  GemmEx gemm = nullptr;
  Cublas() {
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      if ((lib = dlopen(name, RTLD_NOW)) != nullptr) break;
    }
    if (lib == nullptr) return;
    auto create = reinterpret_cast<Create>(dlsym(lib, "cublasCreate_v2"));
    gemm = reinterpret_cast<GemmEx>(dlsym(lib, "cublasGemmEx"));
    if (create == nullptr || gemm == nullptr || create(&handle) != 0) gemm = nullptr;
  }
  // out [m, n] = a [m, k] b [n, k]^T, row-major: out^T = b a^T in column-major terms
  cudaError_t operator()(const Params& q) const {
    const float one = 1.f, zero = 0.f;
    const int r = gemm(handle, 1, 0, q.n, q.m, q.k, &one, q.b, 14, (int)q.ldb, q.a, 14, (int)q.lda,
                       &zero, q.out, 14, (int)q.ldc, 68, -1);
    return r == 0 ? cudaSuccess : cudaErrorUnknown;
  }
};
template <typename T = __nv_bfloat16, int... kN>
void AddHalf(std::vector<std::pair<std::string, L>>& vs, int m, int n, float* ws,
             const DeviceProps& props, std::integer_sequence<int, kN...>) {
  auto one = [&](auto tag) {
    constexpr int N = decltype(tag)::value;
    const int64_t at = (m + N - 1) / N, ctas = (n + 63) / 64 * (at + at % 2);
    if (at > 8 || N >= m + 48 || ctas > props.sm_count) return;
    using Tl = gemm::Sm90SwapHalf<T, N>;
    vs.push_back({"h" + std::to_string(N), Direct<Tl>(ws, props)});
    if (2 * ctas <= props.sm_count) {
      vs.push_back({"h" + std::to_string(N) + "/2", Direct<Tl>(ws, props, 2)});
    }
  };
  (one(std::integral_constant<int, kN>{}), ...);
}
// Plain tiles of 128 rows of a and kN weight rows, unclustered, where their grid is one round
// covering at least half the SMs (gap2 set; cuBLAS's 128 x 96 and 128 x 144 at n 6144)
template <int... kN>
void AddWide(std::vector<std::pair<std::string, L>>& vs, int m, int n, float* ws,
             const DeviceProps& props, std::integer_sequence<int, kN...>) {
  auto one = [&](auto tag) {
    constexpr int N = decltype(tag)::value;
    const int64_t tiles = (m + 127) / 128 * ((n + N - 1) / N);
    if (tiles > props.sm_count || 2 * tiles < props.sm_count) return;
    constexpr int kSt = (232448 - 1024 - 24576 - 256) / (16384 + N * 128);
    using Tl = gemm::Sm90Tile<__nv_bfloat16, 2, N, (kSt < 6 ? kSt : 6), false, 1>;
    vs.push_back({"w" + std::to_string(N), Direct<Tl>(ws, props)});
  };
  (one(std::integral_constant<int, kN>{}), ...);
}
// As many stages (at most 8) as fit the H100's 227 KB for plain tiles of 128 rows of a by kN
// weight rows (the C buffer as sm90.h's Sm90Tile sizes it)
constexpr int WideStages(int n) {
  const int c = n % 64 != 0 ? 0 : (64 * n * 2 > 16384 ? 64 * n * 2 : 16384);
  const int st = (232448 - 1024 - c) / (16384 + 128 * n + 16);
  return st < 8 ? st : 8;
}
// The same tiles in clusters of 2 (gap6 set): "wa<n>" on the same rows of a (horizontally adjacent,
// each block loading half of the a tile, kShareA), "wb<n>" on the same weight rows (vertically
// adjacent, b multicast), where the clusters fit one round of sms / 2 - 2 slots (n >= 16384: any)
template <int... kN>
void AddWideClusters(std::vector<std::pair<std::string, L>>& vs, int m, int n, float* ws,
                     const DeviceProps& props, std::integer_sequence<int, kN...>,
                     bool force = false) {
  auto one = [&](auto tag) {
    constexpr int N = decltype(tag)::value;
    const int64_t tm = (m + 127) / 128, tn = (n + N - 1) / N;
    const int64_t slots = props.sm_count / 2 - 2;
    const bool many = force || n >= 16384;
    if (many || (tm * ((tn + 1) / 2) <= slots && 4 * tm * ((tn + 1) / 2) >= 3 * slots)) {
      using Tl = gemm::Sm90Tile<__nv_bfloat16, 2, N, WideStages(N), false, 2, false, false, true>;
      vs.push_back({"wa" + std::to_string(N), Direct<Tl>(ws, props)});
    }
    if (many || (((tm + 1) / 2) * tn <= slots && 4 * ((tm + 1) / 2) * tn >= 3 * slots)) {
      using Tl = gemm::Sm90Tile<__nv_bfloat16, 2, N, WideStages(N), false, 2>;
      vs.push_back({"wb" + std::to_string(N), Direct<Tl>(ws, props)});
    }
  };
  (one(std::integral_constant<int, kN>{}), ...);
}
// Plain tiles of 128 rows of a by kN weight rows, unclustered, over any number of rounds (stream-K
// through Direct) (gap9: the decode layer's GEMMs)
template <int... kN>
void AddWideAny(std::vector<std::pair<std::string, L>>& vs, float* ws, const DeviceProps& props,
                std::integer_sequence<int, kN...>) {
  auto one = [&](auto tag) {
    constexpr int N = decltype(tag)::value;
    using Tl = gemm::Sm90Tile<__nv_bfloat16, 2, N, WideStages(N), false, 1>;
    vs.push_back({"w" + std::to_string(N), Direct<Tl>(ws, props)});
  };
  (one(std::integral_constant<int, kN>{}), ...);
}
// gap11: one-group tiles of 64 rows of a by kN weight rows ("s<n>"), split 1-4 ("/<splits>"), and
// swapped one-group tiles unclustered, 64 weight rows by kN rows of a ("u<n>"), split 1-2
constexpr int OneGroupStages(int n) {
  const int c = n % 64 != 0 ? 0 : (64 * n * 2 > 8192 ? 64 * n * 2 : 8192);
  const int st = (232448 - 1024 - c - 256) / (8192 + 128 * n);
  return st < 12 ? st : 12;
}
// The bulk-copy GEMV (gemv.h, GemvBulkKernel): kA 16-row tiles of b per group, kKC-long pieces
// of its rows, as many stages (at most 8) as fit 225 KB with the warps' sums.
constexpr int BulkStages(int a, int t, int kc) {
  const int slot = 16 * a * (kc + 32) * 2, red = 8 * a * t * 4 * 32 * 4;
  const int st = (225 * 1024 - red - 128) / slot;
  return st < 8 ? st : 8;
}
template <int kA, int kKC>
L GemvBulk(int blocks = 0) {
  return [blocks](Params q) -> cudaError_t {
    static DeviceProps props;
    static const bool got = GetDeviceProps(&props) == cudaSuccess;
    if (!got) return cudaErrorUnknown;
    const int tiles = (q.m + 7) / 8;
#define XK_BULK(T)                                                                               \
  return gemm::LaunchGemvBulk<__nv_bfloat16, kA, T, kKC, BulkStages(kA, T, kKC)>(q, 0, props, \
                                                                                blocks)
    if (tiles <= 1) XK_BULK(1);
    if (tiles <= 2) XK_BULK(2);
    if constexpr (kA == 1) {
      if (tiles <= 4) XK_BULK(4);
      if (tiles <= 8) XK_BULK(8);
    }
#undef XK_BULK
    return cudaErrorInvalidValue;
  };
}
template <int... kN>
void AddOneGroup(std::vector<std::pair<std::string, L>>& vs, float* ws, const DeviceProps& props,
                 std::integer_sequence<int, kN...>) {
  auto one = [&](auto tag) {
    constexpr int N = decltype(tag)::value;
    using Tl = gemm::Sm90Tile<__nv_bfloat16, 1, N, OneGroupStages(N), false>;
    using Tu = gemm::Sm90Tile<__nv_bfloat16, 1, N, OneGroupStages(N), false, 1, false, true>;
    for (int sp = 1; sp <= 4; ++sp) {
      const std::string t = sp == 1 ? "" : "/" + std::to_string(sp);
      vs.push_back({"s" + std::to_string(N) + t, Direct<Tl>(ws, props, sp)});
      if (sp <= 2) vs.push_back({"u" + std::to_string(N) + t, Direct<Tu>(ws, props, sp)});
    }
  };
  (one(std::integral_constant<int, kN>{}), ...);
}
int main() {
  DeviceProps props;
  CHECK(GetDeviceProps(&props));
  using B16 = __nv_bfloat16;
  using F8 = __nv_fp8_e4m3;
  struct S {
    int m, n, k;
    Elem in;
    Scale sc;
    int act = -1;
  };
  std::vector<S> shapes = {
      {8192, 8192, 8192, Elem::kBF16, Scale::kNone},
      {4096, 4096, 4096, Elem::kBF16, Scale::kNone},
      {16384, 8192, 2048, Elem::kBF16, Scale::kNone},
      {8192, 4096, 4096, Elem::kBF16, Scale::kNone},
      {8192, 6144, 4096, Elem::kBF16, Scale::kNone},
      {8192, 4096, 14336, Elem::kBF16, Scale::kNone},
      {2048, 4096, 4096, Elem::kBF16, Scale::kNone},
      {1024, 4096, 4096, Elem::kBF16, Scale::kNone},
      {8192, 8192, 8192, Elem::kE4M3, Scale::kTensor},
      {8192, 8192, 8192, Elem::kE4M3, Scale::kRow},
      {8192, 8192, 8192, Elem::kE4M3, Scale::kBlock},
      {4096, 4096, 4096, Elem::kE4M3, Scale::kRow},
      {4096, 4096, 4096, Elem::kE4M3, Scale::kBlock},
      {8192, 4096, 4096, Elem::kE4M3, Scale::kRow},
      {1000, 1040, 1040, Elem::kBF16, Scale::kNone},
      {1000, 1040, 1040, Elem::kE4M3, Scale::kRow},
      {8192, 14336, 4096, Elem::kBF16, Scale::kNone, 0},
      {4096, 14336, 4096, Elem::kBF16, Scale::kNone, 0},
  };
  float* ws;
  const int64_t wsn = std::max<int64_t>({(int64_t)props.sm_count * (128 * 256 + 2), 2 * 576 * 8192,
                                         4ll * 384 * 28672});  // (gap: 4 splits of 384 x 28672)
  CHECK(cudaMalloc(&ws, wsn * 4));
  CHECK(cudaMemset(ws, 0, wsn * 4));
  const char* set = std::getenv("AB_SET");
  if (set && std::string(set) == "mid8") {  // e4m3 row-wise at mid-sized m
    shapes.clear();
    for (int m : {192, 256, 320, 384, 448, 512, 576}) {
      shapes.push_back({m, 4096, 4096, Elem::kE4M3, Scale::kRow});
      shapes.push_back({m, 4096, 14336, Elem::kE4M3, Scale::kRow});
    }
    for (int m : {192, 256, 320}) shapes.push_back({m, 8192, 8192, Elem::kE4M3, Scale::kRow});
  }
  if (set && std::string(set) == "mid2") {  // weights of 24-56 tiles: the sized tiles forced
    shapes.clear();
    for (int n : {3072, 3584, 5120, 7168}) {
      for (int m : {256, 320, 384, 512}) shapes.push_back({m, n, 4096, Elem::kBF16, Scale::kNone});
    }
  }
  if (set && std::string(set) == "mid") {
    shapes.clear();
    for (int m : {160, 192, 200, 256, 320, 384, 448, 512, 576}) {
      shapes.push_back({m, 4096, 4096, Elem::kBF16, Scale::kNone});
      shapes.push_back({m, 4096, 14336, Elem::kBF16, Scale::kNone});
    }
    for (int m : {192, 256, 300, 320}) shapes.push_back({m, 8192, 8192, Elem::kBF16, Scale::kNone});
    for (int m : {384, 512}) shapes.push_back({m, 2048, 4096, Elem::kBF16, Scale::kNone});
    shapes.push_back({320, 6144, 4096, Elem::kBF16, Scale::kNone});
  }
  if (set && std::string(set) == "gap") {  // bf16 mid-sized m where cuBLAS leads by 15-50%
    shapes.clear();
    for (int m : {160, 192, 200, 320, 384}) {
      shapes.push_back({m, 4096, 4096, Elem::kBF16, Scale::kNone});
    }
    for (int m : {192, 256, 384}) shapes.push_back({m, 6144, 4096, Elem::kBF16, Scale::kNone});
    for (int m : {320, 384}) shapes.push_back({m, 28672, 4096, Elem::kBF16, Scale::kNone});
    shapes.push_back({320, 4096, 14336, Elem::kBF16, Scale::kNone});
    shapes.push_back({384, 2048, 4096, Elem::kBF16, Scale::kNone});
  }
  if (set && std::string(set) == "gap2") {  // fitting the one-group swapped and 128 x n tiles
    shapes.clear();
    for (int m : {136, 160, 176, 224, 256, 288, 352, 384, 416}) {
      shapes.push_back({m, 4096, 4096, Elem::kBF16, Scale::kNone});
    }
    for (int m : {160, 256, 384}) shapes.push_back({m, 4096, 14336, Elem::kBF16, Scale::kNone});
    for (int m : {160, 256, 384, 512, 640}) {
      shapes.push_back({m, 2048, 4096, Elem::kBF16, Scale::kNone});
    }
    for (int m : {256, 512, 1024}) shapes.push_back({m, 1024, 4096, Elem::kBF16, Scale::kNone});
    for (int m : {256, 320, 384, 512}) shapes.push_back({m, 6144, 4096, Elem::kBF16, Scale::kNone});
    for (int m : {256, 384}) shapes.push_back({m, 5120, 5120, Elem::kBF16, Scale::kNone});
    for (int m : {192, 256, 384}) shapes.push_back({m, 8192, 8192, Elem::kBF16, Scale::kNone});
  }
  if (set && std::string(set) == "gap6") {  // plain 128 x n tiles in clusters at n 4608-28672
    shapes.clear();
    for (int m : {192, 256, 320, 384, 448, 512}) {
      shapes.push_back({m, 6144, 4096, Elem::kBF16, Scale::kNone});
    }
    for (int m : {256, 384}) shapes.push_back({m, 4608, 3584, Elem::kBF16, Scale::kNone});
    for (int m : {320, 384, 512}) shapes.push_back({m, 28672, 4096, Elem::kBF16, Scale::kNone});
  }
  if (set && std::string(set) == "gap7") {  // where 128 x 144 tiles fill 97-100% of 132 SMs
    shapes.clear();
    for (int m : {272, 320, 384}) shapes.push_back({m, 6144, 4096, Elem::kBF16, Scale::kNone});
    for (int m : {200, 256}) shapes.push_back({m, 9216, 4096, Elem::kBF16, Scale::kNone});
    for (int m : {400, 448, 512}) shapes.push_back({m, 4608, 3584, Elem::kBF16, Scale::kNone});
    for (int m : {704, 768}) shapes.push_back({m, 3072, 3072, Elem::kBF16, Scale::kNone});
    shapes.push_back({1024, 2304, 2304, Elem::kBF16, Scale::kNone});
    shapes.push_back({384, 6144, 14336, Elem::kBF16, Scale::kNone});
  }
  if (set && std::string(set) == "gap3") {  // the one-group swapped tiles at decode batches
    shapes.clear();
    for (int m : {96, 128}) {
      for (auto nk : {std::pair<int, int>{4096, 4096}, {6144, 4096}, {4096, 14336}, {2048, 4096},
                      {1024, 4096}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
  }
  if (set && std::string(set) == "gap9") {  // the decode layer's GEMMs (Llama 3 8B) at m 64-256
    // The model bench's decode b128 layer on the H200 (results/model-h200.jsonl): its four GEMMs
    // took 0.168 ms against cuBLAS's 0.149 in torch.compile's layer, the gate + up projection
    // (128 x 28672 x 4096) 77 us against 67 (cuBLAS's nvjet 112 x 128 swapped tile, 256 tiles).
    shapes.clear();
    for (int m : {64, 128, 256}) {
      for (auto nk :
           {std::pair<int, int>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
  }
  if (set && std::string(set) == "gap10") {  // gap9's losses to cuBLAS, with gap's tiles forced
    // gap9 on the H200 (2026-11-28, eighth session, GPU-51afd693), us, as the adapters call it
    // against cuBLAS: 128 x 6144 x 4096 23.9 / 17.6, 256 x 6144 26.8 / 23.0, 64 x 4096 x 4096
    // 14.5 / 12.5, 128 x 4096 x 14336 40.4 / 38.1, 256 x 4096 x 14336 52.7 / 49.2.
    shapes.clear();
    for (int m : {64, 128, 256}) shapes.push_back({m, 6144, 4096, Elem::kBF16, Scale::kNone});
    shapes.push_back({64, 4096, 4096, Elem::kBF16, Scale::kNone});
    for (int m : {128, 256}) shapes.push_back({m, 4096, 14336, Elem::kBF16, Scale::kNone});
  }
  if (set && std::string(set) == "gap11") {  // decode shapes: narrower and one-group tiles
    // gap10 found no tile of ours within 15% of cuBLAS at 128 x 6144 x 4096 (48 weight tiles of
    // 128 rows: 36% of the SMs) nor at m 64 x 4096 x 4096: plain 128 x 48 tiles (128 of them at
    // n 6144), one-group 64 x n tiles split 1-4, swapped one-group tiles unclustered.
    shapes.clear();
    for (int m : {64, 128}) {
      shapes.push_back({m, 6144, 4096, Elem::kBF16, Scale::kNone});
      shapes.push_back({m, 4096, 4096, Elem::kBF16, Scale::kNone});
    }
    shapes.push_back({128, 4096, 14336, Elem::kBF16, Scale::kNone});
    shapes.push_back({64, 28672, 4096, Elem::kBF16, Scale::kNone});
  }
  if (set && std::string(set) == "gap12") {  // m 65-128: gap11's two wins over more shapes
    // gap11 on the H200 (2026-11-28, ninth session, GPU-ff4dd829), us, the dispatch -> the tile:
    // 128 x 6144 x 4096 24.0 -> plain 128 x 48 tiles 19.4 (cuBLAS 17.8); 128 x 4096 x 14336
    // 45.1 -> one-group 64 x 128 tiles split in two 38.6 (38.7). Where do they generalise?
    shapes.clear();
    for (int m : {96, 128}) {
      for (auto nk : {std::pair<int, int>{6144, 4096}, {5120, 4096}, {8192, 4096}, {12288, 4096},
                      {4096, 8192}, {4096, 14336}, {8192, 8192}, {10240, 8192}, {8192, 28672},
                      {2048, 14336}, {3072, 4096}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
  }
  if (set && std::string(set) == "gap14") {  // leads gap12 / gap13 left
    // (1) m 97-128: the swapped one-group tiles unclustered (64 weight rows x 128 rows of a,
    // "u128") ran ahead of the dispatch at 128 x 8192 (4096 / 8192 / 28672: 22.1 / 42.2 / 131.2
    // against 23.4 / 45.0 / 138.6) and 128 x 5120 x 4096 (19.1 against 20.2), GPU-ce6f95d7;
    // (2) m 192-256: 128 x 128 tiles split in two ("mid/2") against the swapped tiles SwapHalfPlan
    // takes (256 x 4096 x 14336: 48.9 against 52.1, eighth session).
    shapes.clear();
    for (int m : {112, 128}) {
      for (auto nk : {std::pair<int, int>{5120, 4096}, {7168, 4096}, {8192, 4096}, {9216, 4096},
                      {8192, 8192}, {5120, 8192}, {8192, 28672}, {14336, 4096}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
    for (int m : {192, 256}) {
      for (auto nk : {std::pair<int, int>{4096, 14336}, {4096, 4096}, {4096, 8192}, {2048, 8192},
                      {3072, 4096}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
  }
  if (set && std::string(set) == "gap16") {  // m 97-128: where do the "u128" tiles win?
    // gap14 (GPU-9ae4f5bf): the unclustered swapped one-group tiles, 64 weight rows by 128 rows
    // of a, ran ahead of the dispatch at 128 x 8192 x 4096 / 8192 / 28672 and 128 x 9216 x 4096
    // (27.9 against 33.4); their grid is n / 64 blocks. Over more widths and depths, at m 100 too.
    shapes.clear();
    for (int m : {100, 128}) {
      for (auto nk : {std::pair<int, int>{5120, 4096}, {6144, 4096}, {7168, 4096}, {8192, 4096},
                      {9216, 4096}, {10240, 4096}, {12288, 4096}, {14336, 4096}, {5120, 8192},
                      {8192, 8192}, {10240, 8192}, {8192, 14336}, {8192, 28672}, {6144, 28672}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
  }
  if (set && std::string(set) == "gap17") {  // short TMA boxes (m under the tile's rows)
    // gap16: the 128-row tiles ran 20-30% slower at m 100 than at m 128 (the same tiles and
    // grid), their a box reaching past a's end; "long" is the dispatch with such boxes.
    shapes.clear();
    for (int m : {8, 16, 32, 48, 72, 100, 112, 120, 128}) {
      for (auto nk : {std::pair<int, int>{8192, 8192}, {6144, 4096}, {4096, 14336},
                      {8192, 28672}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
  }
  if (set && std::string(set) == "gap18") {  // m <= 64: narrow swapped one-group tiles
    // bf16 16 x 8192 x 8192 ran 36.6 us against cuBLAS's 33.8 (bench, GPU-15e3accb), its 64 x 128
    // tiles as slow at m 8 as at 64: the swapped one-group tiles of 48 and 64 rows of a ("u48",
    // "u64": the wgmma's n 48 / 64 instead of the 64 a-rows x 128 weight rows of Sm90Small).
    shapes.clear();
    for (int m : {8, 16, 32, 48, 64}) {
      for (auto nk : {std::pair<int, int>{8192, 8192}, {8192, 28672}, {4096, 14336}, {6144, 4096},
                      {28672, 4096}, {4096, 4096}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
  }
  if (set && std::string(set) == "mg") {  // m 1-64 on the bulk-copy GEMV (gemv.h)
    // the swapped 64-row tiles run m 8-64 at about 3.7 TB/s (gap18) where the GEMV streams b at
    // 4.3; GemvBulkKernel copies b's rows into shared memory in long runs, a's rows the mma's B
    // fragments ("b<kA>k<kKC>": kA 16-row tiles of b per group, kKC-long pieces of its rows)
    shapes.clear();
    for (int m : {1, 2, 4, 8, 16, 24, 32, 48, 64}) {
      for (auto nk : {std::pair<int, int>{8192, 8192}, {8192, 28672}, {6144, 4096}, {4096, 14336},
                      {28672, 4096}}) {
        shapes.push_back({m, nk.first, nk.second, Elem::kBF16, Scale::kNone});
      }
    }
    for (int m : {1, 16, 64}) shapes.push_back({m, 14336, 4096, Elem::kBF16, Scale::kNone, 0});
  }
  if (set && std::string(set) == "gap8") {  // e4m3 row-wise: the one-group swapped tiles forced
    shapes.clear();
    for (int m : {96, 128, 192, 256, 320, 384}) {
      shapes.push_back({m, 4096, 4096, Elem::kE4M3, Scale::kRow});
      shapes.push_back({m, 4096, 14336, Elem::kE4M3, Scale::kRow});
    }
    for (int m : {256, 512}) shapes.push_back({m, 2048, 4096, Elem::kE4M3, Scale::kRow});
  }
  if (set && std::string(set) == "fp8t") {  // e4m3 tile shapes (cuBLASLt's: 144 x 128, 128 x 128)
    shapes.clear();
    for (Scale sc : {Scale::kTensor, Scale::kRow}) {
      shapes.push_back({8192, 8192, 8192, Elem::kE4M3, sc});
      shapes.push_back({8192, 4096, 14336, Elem::kE4M3, sc});
    }
    shapes.push_back({4096, 4096, 4096, Elem::kE4M3, Scale::kRow});
  }
  if (set && std::string(set) == "blk") {  // e4m3 block scales (and per tensor at 8192^3)
    shapes = {{8192, 8192, 8192, Elem::kE4M3, Scale::kBlock},
              {4096, 4096, 4096, Elem::kE4M3, Scale::kBlock},
              {8192, 4096, 14336, Elem::kE4M3, Scale::kBlock},
              {4096, 7168, 7168, Elem::kE4M3, Scale::kBlock},
              {8192, 7168, 2048, Elem::kE4M3, Scale::kBlock},
              {8192, 8192, 8192, Elem::kE4M3, Scale::kTensor}};
  }
  const char* only = std::getenv("AB_ONLY");  // "m,n,k": that shape only
  for (const S& s : shapes) {
    if (only &&
        std::to_string(s.m) + "," + std::to_string(s.n) + "," + std::to_string(s.k) != only) {
      continue;
    }
    if (set && std::string(set) == "fp8" && s.in != Elem::kE4M3) continue;
    if (const char* sc = std::getenv("AB_SCALE")) {  // tensor, row or block: those e4m3 shapes only
      const Scale want = std::string(sc) == "tensor" ? Scale::kTensor
                         : std::string(sc) == "row"  ? Scale::kRow
                                                     : Scale::kBlock;
      if (s.sc != want) continue;
    }
    const int eb = s.in == Elem::kE4M3 ? 1 : 2;
    uint8_t *a, *b;
    void* out;
    float *sa, *sb;
    CHECK(cudaMalloc(&a, (int64_t)s.m * s.k * eb));
    CHECK(cudaMalloc(&b, (int64_t)s.n * (s.act >= 0 ? 2 : 1) * s.k * eb));
    CHECK(cudaMalloc(&out, (int64_t)s.m * s.n * 2));
    FillB<<<1024, 256>>>(a, (int64_t)s.m * s.k * eb, 1);
    FillB<<<1024, 256>>>(b, (int64_t)s.n * (s.act >= 0 ? 2 : 1) * s.k * eb, 2);
    // AB_ROT: b (the weights) rotates over copies covering at least 3 x 50 MB, so that each
    // call reads its weights from memory as a model's layers do (else they stay in the L2)
    std::vector<uint8_t*> bsets;
    if (std::getenv("AB_ROT") != nullptr) {
      const int64_t bytes = (int64_t)s.n * (s.act >= 0 ? 2 : 1) * s.k * eb;
      const int64_t copies = std::max<int64_t>(3, (150ll << 20) / bytes + 1);
      for (int64_t c = 0; c < copies; ++c) {
        uint8_t* x;
        CHECK(cudaMalloc(&x, bytes));
        FillB<<<1024, 256>>>(x, bytes, 3 + (uint32_t)c);
        bsets.push_back(x);
      }
    }
    const int kb = (s.k + 127) / 128;
    const int64_t nsa = (int64_t)s.m * kb, nsb = (int64_t)std::max(s.n, s.m) * kb;
    CHECK(cudaMalloc(&sa, nsa * 4));
    CHECK(cudaMalloc(&sb, nsb * 4));
    FillF<<<256, 256>>>(sa, nsa);
    FillF<<<256, 256>>>(sb, nsb);
    Params p;
    p.a = a;
    p.b = b;
    p.out = out;
    p.lda = s.k;
    p.ldb = s.k;
    p.ldc = s.n;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.in_type = s.in;
    p.out_type = Elem::kBF16;
    if (s.sc != Scale::kNone) {
      p.a_scale = sa;
      p.b_scale = sb;
      p.a_scale_kind = p.b_scale_kind = s.sc;
      p.a_scale_ld = p.b_scale_ld = kb;
    }
    p.splits = 1;
    p.act = s.act;
    std::vector<std::pair<std::string, L>> vs;
    vs.push_back({"dp", [](Params q) {
                    q.workspace = nullptr;
                    return gemm::Gemm(q, 0);
                  }});
    vs.push_back({"sk", [ws](Params q) {
                    q.workspace = ws;
                    return gemm::Gemm(q, 0);
                  }});
    if (set && std::string(set) == "mg") {
      vs.clear();
      vs.push_back({"lib", [ws](Params q) {
                      q.workspace = ws;
                      CHECK(gemm::PlanSplits(q, &q.splits));
                      return gemm::Gemm(q, 0);
                    }});
      static Cublas cublas;
      if (cublas.gemm != nullptr && s.act < 0) {
        vs.push_back({"cublas", [](Params q) { return cublas(q); }});
      }
      vs.push_back({"tiles", [ws](Params q) {  // the sm90 tiles m 2-8 took before
                      q.workspace = ws;
                      q.path = gemm::Path::kSm90;
                      CHECK(gemm::PlanSplits(q, &q.splits));
                      return gemm::Gemm(q, 0);
                    }});
      vs.push_back({"b1k512", GemvBulk<1, 512>()});
      vs.push_back({"b1k1024", GemvBulk<1, 1024>()});
      vs.push_back({"b1k2048", GemvBulk<1, 2048>()});
      if (s.m <= 16) {
        vs.push_back({"b2k512", GemvBulk<2, 512>()});
        vs.push_back({"b2k1024", GemvBulk<2, 1024>()});
      }
    }
    if (set && std::string(set) == "mid2") {
      const int64_t w = ceil_div(s.n, 128);
      int64_t t = std::min<int64_t>(4, props.sm_count / w);
      t -= t % 2;
      int nt = 0;
      for (const int c : {48, 64, 80, 96, 112, 128, 144, 160}) {
        if (c * t >= s.m) {
          nt = c;
          break;
        }
      }
      if (nt > 0) {
        vs.push_back({"sw" + std::to_string(nt), [nt, &props](Params q) {  // as dispatched
                        return gemm::LaunchSwapSizedN<B16, B16>(nt, q, 0, props);
                      }});
      }
    }
    if (set && (std::string(set).rfind("mid", 0) == 0 || std::string(set).rfind("gap", 0) == 0)) {
      // as the adapters call it
      vs.push_back({"lib", [ws](Params q) {
                      q.workspace = ws;
                      CHECK(gemm::PlanSplits(q, &q.splits));
                      return gemm::Gemm(q, 0);
                    }});
    }
    if (set && std::string(set) == "gap17") {
      vs.push_back({"long", [ws](Params q) {  // the dispatch with boxes past a's end
                      q.workspace = ws;
                      q.short_boxes = false;
                      CHECK(gemm::PlanSplits(q, &q.splits));
                      return gemm::Gemm(q, 0);
                    }});
    }
    const bool gap10 = set && std::string(set) == "gap10";
    if (set && (std::string(set) == "gap" || gap10)) {
      // every 16-bit tile of the dispatch forced, unsplit and split 2-4 (split-K through the
      // workspace, reduced by the second kernel), and the sized swapped tiles at each a-tile size
      for (int sp = 1; sp <= 4; ++sp) {
        const std::string t = sp == 1 ? "" : "/" + std::to_string(sp);
        vs.push_back({"mid" + t, Direct<gemm::Sm90Mid<B16>>(ws, props, sp)});
        vs.push_back({"swap" + t, Direct<gemm::Sm90Swap192<B16>>(ws, props, sp)});
        if (sp <= 2) vs.push_back({"large" + t, Direct<gemm::Sm90Large<B16>>(ws, props, sp)});
      }
      vs.push_back({"w192", Direct<gemm::Sm90Wide192<B16>>(ws, props)});
      vs.push_back({"slim", Direct<gemm::Sm90Slim<B16>>(ws, props)});
      for (const int nt : gemm::SizeList(gemm::SwapSizes{})) {
        if (nt * 8 < s.m || nt >= s.m + 48) continue;  // up to 8 a-tiles, at most one too many
        vs.push_back({"sw" + std::to_string(nt), [nt, &props](Params q) {
                        return gemm::LaunchSwapSizedN<B16, B16>(nt, q, 0, props);
                      }});
        // split in two where the unsplit clusters fill at most half the SMs
        if (ceil_div(s.n, 128) * ceil_div(s.m, nt) * 2 <= props.sm_count) {
          vs.push_back({"sw" + std::to_string(nt) + "/2", [nt, ws, &props](Params q) {
                          q.workspace = ws;
                          q.splits = 2;
                          return gemm::LaunchSwapSizedN<B16, B16>(nt, q, 0, props);
                        }});
        }
      }
    }
    if (set && std::string(set) == "gap8") {
      AddHalf<F8>(vs, s.m, s.n, ws, props,
                  std::integer_sequence<int, 48, 64, 80, 96, 112, 128, 144, 160, 192>{});
    } else if (set && std::string(set).rfind("gap", 0) == 0) {
      AddHalf(vs, s.m, s.n, ws, props, gemm::SwapHalfSizes{});
      if (std::string(set) == "gap") {
        // tiles of cuBLAS's n 144 (a's rows on the wgmma's m side, 128 or 64 of them), unclustered
        vs.push_back({"n144", Direct<gemm::Sm90Tile<B16, 2, 144, 5, false, 1>>(ws, props)});
        vs.push_back({"n176", Direct<gemm::Sm90Tile<B16, 2, 176, 5, false, 1>>(ws, props)});
        vs.push_back({"s144", Direct<gemm::Sm90Tile<B16, 1, 144, 8, false, 1>>(ws, props)});
      } else if (std::string(set) != "gap9" && !gap10 && std::string(set) != "gap11" &&
                 std::string(set) != "gap12" && std::string(set) != "gap14" &&
                 std::string(set) != "gap16" && std::string(set) != "gap17" &&
                 std::string(set) != "gap18") {
        AddWide(vs, s.m, s.n, ws, props,
                std::integer_sequence<int, 96, 112, 128, 144, 160, 176, 192>{});
      }
      if (std::string(set) == "gap7") {
        vs.push_back({"w144s6", Direct<gemm::Sm90Tile<B16, 2, 144, 6, false, 1>>(ws, props)});
      }
      if (std::string(set) == "gap6") {
        AddWideClusters(vs, s.m, s.n, ws, props,
                        std::integer_sequence<int, 96, 112, 128, 144, 160, 176, 192>{});
      }
      if (std::string(set) == "gap11") {
        AddWideAny(vs, ws, props, std::integer_sequence<int, 48, 64, 96>{});
        AddOneGroup(vs, ws, props, std::integer_sequence<int, 48, 64, 96, 128>{});
      }
      if (std::string(set) == "gap12") {
        AddWideAny(vs, ws, props, std::integer_sequence<int, 48, 64, 96>{});
        AddOneGroup(vs, ws, props, std::integer_sequence<int, 64, 128>{});
      }
      if (std::string(set) == "gap16" || std::string(set) == "gap17") {
        AddOneGroup(vs, ws, props, std::integer_sequence<int, 128>{});
      }
      if (std::string(set) == "gap17") {
        AddWideAny(vs, ws, props, std::integer_sequence<int, 48, 64, 96>{});
      }
      if (std::string(set) == "gap18") {
        AddOneGroup(vs, ws, props, std::integer_sequence<int, 48, 64>{});
      }
      if (std::string(set) == "gap14") {
        AddWideAny(vs, ws, props, std::integer_sequence<int, 64, 96>{});
        AddOneGroup(vs, ws, props, std::integer_sequence<int, 96, 128>{});
        vs.push_back({"mid", Direct<gemm::Sm90Mid<B16>>(ws, props)});
        vs.push_back({"mid/2", Direct<gemm::Sm90Mid<B16>>(ws, props, 2)});
      }
      if (std::string(set) == "gap9" || gap10) {
        // every round count (stream-K), and in clusters of 2 sharing a's tile ("wa": each block
        // loads half of it, so a's bytes from L2 halve) or b's ("wb")
        AddWideAny(vs, ws, props, std::integer_sequence<int, 64, 96, 128, 192, 256>{});
        AddWideClusters(vs, s.m, s.n, ws, props, std::integer_sequence<int, 128, 192, 256>{},
                        true);
        vs.push_back({"mid", Direct<gemm::Sm90Mid<B16>>(ws, props)});
        vs.push_back({"large", Direct<gemm::Sm90Large<B16>>(ws, props)});
        vs.push_back({"swap", Direct<gemm::Sm90Swap192<B16>>(ws, props)});
      }
    }
    if (set && (std::string(set) == "mid" || std::string(set) == "mid2" ||
                (std::string(set).rfind("gap", 0) == 0 && std::string(set) != "gap8"))) {
      static Cublas cublas;
      if (cublas.gemm != nullptr) vs.push_back({"cublas", [](Params q) { return cublas(q); }});
      // the dispatch before the swapped sized tiles: TileGrid's tile (since 2026-11-28 also the
      // 128 x 144 tiles) and PlanSplits' split
      vs.push_back({"old", [ws, &props](Params q) {
                      const int sms = props.sm_count;
                      const gemm::Kernel k = gemm::TileGrid(q, sms);
                      int bm = 0, bn = 0;
                      gemm::TileDims(q, k, sms, &bm, &bn);
                      const int64_t tiles = (int64_t)ceil_div(q.m, bm) * ceil_div(q.n, bn);
                      q.splits = 1;
                      if (k == gemm::Kernel::kSm90Mid && 2 * tiles <= sms) q.splits = 2;
                      if (k == gemm::Kernel::kSm90Swap192) {
                        q.splits = (int)gemm::SwapSplits(tiles, ceil_div(q.k, 64), sms);
                      }
                      q.workspace = ws;
                      q.stream_k = q.splits == 1 && gemm::StreamKElems(q, k, sms) > 0;
                      switch (k) {
                        case gemm::Kernel::kSm90Large:
                          return gemm::LaunchSm90<gemm::Sm90Large<B16>, B16>(q, 0, props);
                        case gemm::Kernel::kSm90Mid:
                          return gemm::LaunchSm90<gemm::Sm90Mid<B16>, B16>(q, 0, props);
                        case gemm::Kernel::kSm90Wide192:
                          return gemm::LaunchSm90<gemm::Sm90Wide192<B16>, B16>(q, 0, props);
                        case gemm::Kernel::kSm90Slim:
                          return gemm::LaunchSm90<gemm::Sm90Slim<B16>, B16>(q, 0, props);
                        case gemm::Kernel::kSm90Wide144:
                          return gemm::LaunchSm90<gemm::Sm90Wide144<B16>, B16>(q, 0, props);
                        case gemm::Kernel::kSm90Swap192:
                          return gemm::LaunchSm90<gemm::Sm90Swap192<B16>, B16>(q, 0, props);
                        default:
                          return cudaErrorInvalidValue;
                      }
                    }});
    } else if (set && std::string(set) == "mid8") {
      // the dispatch before the sized swapped tiles: 128 x 256 tiles, PlanSplits' split
      vs.push_back({"old", [ws, &props](Params q) {
                      const int sms = props.sm_count;
                      const int64_t tiles = (int64_t)ceil_div(q.m, 128) * ceil_div(q.n, 256);
                      q.splits = 1;
                      if (2 * tiles <= sms) {
                        q.splits = (int)std::min<int64_t>(
                            {sms / tiles, std::max<int64_t>(1, ceil_div(q.k, 128) / 4), 64});
                      }
                      q.workspace = ws;
                      q.stream_k =
                          q.splits == 1 && gemm::StreamKElems(q, gemm::Kernel::kSm90Large, sms) > 0;
                      return gemm::LaunchSm90<gemm::Sm90Large<F8>, B16>(q, 0, props);
                    }});
    } else if (set && std::string(set) == "fp8t") {
      vs.push_back({"c2", Direct<gemm::Sm90Tile<F8, 2, 256, 4, false, 2>>(ws, props)});
      vs.push_back({"n128", Direct<gemm::Sm90Tile<F8, 2, 128, 6, false, 1>>(ws, props)});
      vs.push_back({"n128c2", Direct<gemm::Sm90Tile<F8, 2, 128, 6, false, 2>>(ws, props)});
      vs.push_back({"n144c2", Direct<gemm::Sm90Tile<F8, 2, 144, 6, false, 2>>(ws, props)});
      vs.push_back({"n160c2", Direct<gemm::Sm90Tile<F8, 2, 160, 6, false, 2>>(ws, props)});
      vs.push_back({"n192", Direct<gemm::Sm90Tile<F8, 2, 192, 5, false, 1>>(ws, props)});
      vs.push_back({"n192c2", Direct<gemm::Sm90Tile<F8, 2, 192, 5, false, 2>>(ws, props)});
    } else if (set && std::string(set) == "blk") {
      if (s.sc == Scale::kBlock) {
        vs.push_back({"b256", Direct<gemm::Sm90Tile<F8, 2, 256, 4, true>>(ws, props)});
      }
    } else if (set && std::string(set) == "mg") {
    } else if (s.act >= 0) {
    } else if (s.in == Elem::kBF16) {
      vs.push_back({"sk+ord", Direct<gemm::Sm90Tile<B16, 2, 256, 4, false, 2, true>>(ws, props)});
    } else if (s.sc == Scale::kBlock) {
      vs.push_back({"b128+ord", Direct<gemm::Sm90Tile<F8, 2, 128, 6, true, 1, true>>(ws, props)});
      vs.push_back({"b256", Direct<gemm::Sm90Tile<F8, 2, 256, 4, true>>(ws, props)});
    } else {
      vs.push_back({"c2", Direct<gemm::Sm90Tile<F8, 2, 256, 4, false, 2, false>>(ws, props)});
    }
    const double flop = 2.0 * s.m * s.n * s.k;
    const int reps = std::max(3, std::min(50, (int)(2e13 / flop)));
    std::vector<std::vector<float>> t(vs.size());
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    // every variant's output against the first's (the same products; k order may differ)
    void* ref;
    unsigned* dmax;
    const int64_t nout = (int64_t)s.m * s.n;
    CHECK(cudaMalloc(&ref, nout * 2));
    CHECK(cudaMalloc(&dmax, 4));
    std::vector<float> diffs;
    for (size_t i = 0; i < vs.size(); ++i) {
      CHECK(cudaMemset(out, 0xff, nout * 2));  // NaN
      CHECK(vs[i].second(p));
      if (i == 0) CHECK(cudaMemcpy(ref, out, nout * 2, cudaMemcpyDeviceToDevice));
      CHECK(cudaMemset(dmax, 0, 4));
      MaxDiff<<<1024, 256>>>((const __nv_bfloat16*)out, (const __nv_bfloat16*)ref, nout, dmax);
      unsigned h;
      CHECK(cudaMemcpy(&h, dmax, 4, cudaMemcpyDeviceToHost));
      float f;
      memcpy(&f, &h, 4);
      diffs.push_back(f);
      if (std::getenv("AB_DUMP") != nullptr && f > 1e-2f) {  // the first mismatches, by place
        std::vector<__nv_bfloat16> x(nout), y(nout);
        CHECK(cudaMemcpy(x.data(), out, nout * 2, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(y.data(), ref, nout * 2, cudaMemcpyDeviceToHost));
        int shown = 0, bad = 0;
        for (int64_t e = 0; e < nout; ++e) {
          const float u = __bfloat162float(x[e]), v = __bfloat162float(y[e]);
          if (!(fabsf(u - v) <= 1e-2f * (fabsf(v) + 1.f))) {
            ++bad;
            if (shown++ < 12) {
              printf("  %s: row %lld col %lld got %g want %g\n", vs[i].first.c_str(),
                     (long long)(e / s.n), (long long)(e % s.n), u, v);
            }
          }
        }
        printf("  %s: %d of %lld differ\n", vs[i].first.c_str(), bad, (long long)nout);
      }
    }
    cudaFree(ref);
    cudaFree(dmax);
    CHECK(cudaDeviceSynchronize());
    for (int r = 0; r < 9; ++r) {
      for (size_t i0 = 0; i0 < vs.size(); ++i0) {
        const size_t i = (i0 + r) % vs.size();
        CHECK(vs[i].second(p));
        CHECK(cudaEventRecord(e0));
        for (int q = 0; q < reps; ++q) {
          Params pq = p;
          if (!bsets.empty()) pq.b = bsets[q % bsets.size()];
          CHECK(vs[i].second(pq));
        }
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t[i].push_back(ms * 1000 / reps);
      }
    }
    const char* sc = s.sc == Scale::kNone     ? ""
                     : s.sc == Scale::kTensor ? " tensor"
                     : s.sc == Scale::kRow    ? " row"
                                              : " block";
    printf("%-5s%-7s %5dx%5dx%5d", s.in == Elem::kE4M3 ? "e4m3" : "bf16",
           s.act >= 0 ? " gated" : sc, s.m, s.n, s.k);
    double base = 0;
    for (size_t i = 0; i < vs.size(); ++i) {
      std::sort(t[i].begin(), t[i].end());
      const double med = t[i][t[i].size() / 2];
      if (i == 0) base = med;
      printf("  %s %8.1f us %6.0f TF (%.3f) d%.0e", vs[i].first.c_str(), med, flop / med * 1e-6,
             med / base, diffs[i]);
    }
    printf("\n");
    cudaFree(a);
    cudaFree(b);
    for (uint8_t* x : bsets) cudaFree(x);
    cudaFree(out);
    cudaFree(sa);
    cudaFree(sb);
  }
  CHECK(cudaGetLastError());
  return 0;
}
