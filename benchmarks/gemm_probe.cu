// A standalone check-and-time probe of the GEMM launchers (include/xkernels/gemm/gemm.h), with
// no Python: every kernel version on odd shapes against a naive fp32 reference kernel, then
// TFLOP/s at the benchmark shapes. For kernel work on the device, before the full test suite:
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I include \
//       benchmarks/gemm_probe.cu -o /tmp/gemm_probe && /tmp/gemm_probe [--quick]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "probe.h"
#include "xkernels/gemm/gemm.h"

using namespace xkernels;
using gemm::Elem;
using gemm::Params;
using gemm::Scale;

__device__ float Uniform(uint64_t seed, uint64_t i) {  // [-1, 1)
  return static_cast<float>(ProbeHash(seed, i) & 0xFFFFFF) / 8388608.f - 1.f;
}

template <typename T>
__global__ void Fill(T* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<T>(Uniform(seed, i) * scale);
  }
}

template <typename T>
__device__ float ToF(T x) {
  return static_cast<float>(x);
}

// ref[m, n] = sum_k a sa * b sb (+ bias), fp32, one thread per output.
template <typename T>
__global__ void Reference(Params p, float* ref) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
  if (col >= p.n) return;
  const T* a = static_cast<const T*>(p.a) + static_cast<int64_t>(row) * p.lda;
  const T* b = static_cast<const T*>(p.b);
  float s = 0.f;
  for (int k = 0; k < p.k; ++k) {
    const T bv = p.b_layout == gemm::BLayout::kNK ? b[static_cast<int64_t>(col) * p.ldb + k]
                                                  : b[static_cast<int64_t>(k) * p.ldb + col];
    float f = ToF(a[k]) * ToF(bv);
    if (p.a_scale_kind == Scale::kBlock) {
      f *=
          p.a_scale[row * p.a_scale_ld + k / 128] * p.b_scale[(col / 128) * p.b_scale_ld + k / 128];
    }
    s += f;
  }
  if (p.a_scale_kind == Scale::kTensor) s *= p.a_scale[0];
  if (p.a_scale_kind == Scale::kRow) s *= p.a_scale[row];
  if (p.b_scale_kind == Scale::kTensor) s *= p.b_scale[0];
  if (p.b_scale_kind == Scale::kRow) s *= p.b_scale[col];
  if (p.bias) s += static_cast<const float*>(p.bias)[col];
  ref[static_cast<int64_t>(row) * p.n + col] = s;
}

template <typename Out>
__global__ void Compare(const Out* out, int64_t ldc, const float* ref, int m, int n, double* acc) {
  // acc[0] += (out - ref)^2, acc[1] += ref^2, acc[2] = NaN count
  double e = 0, r = 0, nan = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < static_cast<int64_t>(m) * n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float o = static_cast<float>(out[(i / n) * ldc + i % n]), x = ref[i];
    if (!(o == o)) nan += 1;
    e += (o - x) * static_cast<double>(o - x);
    r += static_cast<double>(x) * x;
  }
  atomicAdd(acc, e);
  atomicAdd(acc + 1, r);
  atomicAdd(acc + 2, nan);
}

struct Case {
  int m, n, k;
  Elem in, out;
  gemm::Path path;
  Scale scale;
  bool bias;
  int splits;  // 0: planned
  gemm::BLayout layout = gemm::BLayout::kNK;
  int pad = 0;  // extra row pitch of a (elements)
};

const char* Name(Elem e) {
  return e == Elem::kF16 ? "f16" : e == Elem::kBF16 ? "bf16" : e == Elem::kF32 ? "f32" : "e4m3";
}
const char* Name(Scale s) {
  return s == Scale::kNone     ? "-"
         : s == Scale::kTensor ? "tensor"
         : s == Scale::kRow    ? "row"
                               : "block";
}

int ElemBytes(Elem e) { return e == Elem::kF32 ? 4 : e == Elem::kE4M3 ? 1 : 2; }

// Runs one case: checks it against the reference (check), times it (reps > 0). Returns TFLOP/s.
using Launch = std::function<cudaError_t(const Params&)>;

double Run(const Case& c, bool check, int reps, bool* ok, const char* label = nullptr,
           Launch launch = nullptr) {
  if (!launch) launch = [](const Params& p) { return gemm::Gemm(p, 0); };
  const int64_t lda = c.k + c.pad, ldb = c.layout == gemm::BLayout::kNK ? c.k : c.n;
  const int64_t b_rows = c.layout == gemm::BLayout::kNK ? c.n : c.k;
  const int ib = ElemBytes(c.in), ob = ElemBytes(c.out);
  void *a, *b, *out, *bias = nullptr;
  float *ref, *sa = nullptr, *sb = nullptr, *ws = nullptr;
  CHECK(cudaMalloc(&a, static_cast<int64_t>(c.m) * lda * ib + 16));
  CHECK(cudaMalloc(&b, b_rows * ldb * ib + 16));
  CHECK(cudaMalloc(&out, static_cast<int64_t>(c.m) * c.n * ob));
  CHECK(cudaMemset(out, 0xFF, static_cast<int64_t>(c.m) * c.n * ob));  // poison (NaN)
  const uint64_t seed = 1234 + c.m * 7 + c.n * 13 + c.k;
  if (c.in == Elem::kE4M3) {
    Fill<<<1024, 256>>>(static_cast<__nv_fp8_e4m3*>(a), c.m * lda, seed, 2.f);
    Fill<<<1024, 256>>>(static_cast<__nv_fp8_e4m3*>(b), b_rows * ldb, seed + 1, 2.f);
  } else if (c.in == Elem::kBF16) {
    Fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(a), c.m * lda, seed, 1.f);
    Fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(b), b_rows * ldb, seed + 1, 1.f);
  } else {
    Fill<<<1024, 256>>>(static_cast<__half*>(a), c.m * lda, seed, 1.f);
    Fill<<<1024, 256>>>(static_cast<__half*>(b), b_rows * ldb, seed + 1, 1.f);
  }
  Params p;
  p.a = a, p.b = b, p.out = out, p.lda = lda, p.ldb = ldb, p.ldc = c.n;
  p.m = c.m, p.n = c.n, p.k = c.k, p.in_type = c.in, p.out_type = c.out, p.path = c.path;
  p.b_layout = c.layout;
  const int kb = (c.k + 127) / 128;
  if (c.scale != Scale::kNone) {
    const int64_t na = c.scale == Scale::kTensor ? 1 : c.scale == Scale::kRow ? c.m : c.m * kb;
    const int64_t nb = c.scale == Scale::kTensor ? 1
                       : c.scale == Scale::kRow  ? c.n
                                                 : ((c.n + 127) / 128) * kb;
    CHECK(cudaMalloc(&sa, na * 4));
    CHECK(cudaMalloc(&sb, nb * 4));
    Fill<<<256, 256>>>(sa, na, seed + 2, 1.f);  // signed scales are fine for a check
    Fill<<<256, 256>>>(sb, nb, seed + 3, 1.f);
    p.a_scale = sa, p.b_scale = sb, p.a_scale_kind = p.b_scale_kind = c.scale;
    p.a_scale_ld = p.b_scale_ld = kb;
  }
  if (c.bias) {
    CHECK(cudaMalloc(&bias, c.n * 4));
    Fill<<<64, 256>>>(static_cast<float*>(bias), c.n, seed + 4, 1.f);
    p.bias = bias, p.bias_type = Elem::kF32;
  }
  if (c.splits > 0) {
    p.splits = c.splits;
  } else {
    CHECK(gemm::PlanSplits(p, &p.splits));
  }
  // the workspace: split-K's partial tiles, or (PROBE_SK unset or 1) stream-K's slots, sized
  // for the largest tile (a variant's may be any)
  const char* sk_env = std::getenv("PROBE_SK");
  const bool sk = p.splits == 1 && !(sk_env && std::strcmp(sk_env, "0") == 0);
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t ws_elems = sk ? static_cast<int64_t>(sms) * (128 * 256 + 2)
                              : gemm::WorkspaceElems(p.splits, c.m, c.n);
  if (ws_elems > 0) CHECK(cudaMalloc(&ws, ws_elems * 4));
  p.workspace = ws;
  p.stream_k = sk;
  CHECK(cudaDeviceSynchronize());
  CHECK(launch(p));
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  *ok = true;
  double rel = 0;
  if (check) {
    CHECK(cudaMalloc(&ref, static_cast<int64_t>(c.m) * c.n * 4));
    const dim3 grid((c.n + 127) / 128, c.m);
    if (c.in == Elem::kE4M3) Reference<__nv_fp8_e4m3><<<grid, 128>>>(p, ref);
    if (c.in == Elem::kBF16) Reference<__nv_bfloat16><<<grid, 128>>>(p, ref);
    if (c.in == Elem::kF16) Reference<__half><<<grid, 128>>>(p, ref);
    double* acc;
    CHECK(cudaMalloc(&acc, 3 * sizeof(double)));
    CHECK(cudaMemset(acc, 0, 3 * sizeof(double)));
    if (c.out == Elem::kF32)
      Compare<<<512, 256>>>(static_cast<float*>(out), c.n, ref, c.m, c.n, acc);
    if (c.out == Elem::kBF16)
      Compare<<<512, 256>>>(static_cast<__nv_bfloat16*>(out), c.n, ref, c.m, c.n, acc);
    if (c.out == Elem::kF16)
      Compare<<<512, 256>>>(static_cast<__half*>(out), c.n, ref, c.m, c.n, acc);
    double h[3];
    CHECK(cudaMemcpy(h, acc, sizeof(h), cudaMemcpyDeviceToHost));
    rel = std::sqrt(h[0] / (h[1] > 0 ? h[1] : 1));
    // bf16/fp16 outputs round at 2^-9 / 2^-11 relative; fp32 outputs differ by summation order,
    // and e4m3 wgmma accumulates with fewer mantissa bits than fp32 (about 2^-13 relative per
    // k block of 128; DeepSeek-V3 measured 14 bits on H800)
    const double tol = c.out != Elem::kF32   ? (c.out == Elem::kBF16 ? 8e-3 : 2e-3)
                       : c.in == Elem::kE4M3 ? 1e-3
                                             : 1e-5;
    *ok = h[2] == 0 && rel < tol;
    CHECK(cudaFree(acc));
    CHECK(cudaFree(ref));
  }
  double tflops = 0;
  if (reps > 0) {
    if (const char* x = std::getenv("PROBE_REPS_X")) reps *= std::atoi(x);  // longer runs
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) CHECK(launch(p));
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) CHECK(launch(p));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= reps;
    tflops = 2.0 * c.m * c.n * c.k / (ms * 1e-3) / 1e12;
    std::printf(
        "%-14s %-5s %-5s %-6s path %d %6d %6d %6d splits %2d: %8.4f ms %7.1f TFLOP/s "
        "%7.0f GB/s\n",
        label ? label : "dispatch", Name(c.in), Name(c.out), Name(c.scale),
        static_cast<int>(c.path), c.m, c.n, c.k, p.splits, ms, tflops,
        (static_cast<double>(c.m) * c.k * ib + static_cast<double>(c.n) * c.k * ib +
         static_cast<double>(c.m) * c.n * ob) /
            (ms * 1e-3) / 1e9);
  }
  if (check) {
    std::printf(
        "%-4s %-14s %-5s %-5s %-6s path %d layout %d %5d %5d %5d bias %d splits %2d pad %d: "
        "rel err %.2e\n",
        *ok ? "ok" : "FAIL", label ? label : "dispatch", Name(c.in), Name(c.out), Name(c.scale),
        static_cast<int>(c.path), static_cast<int>(c.layout), c.m, c.n, c.k, c.bias, p.splits,
        c.pad, rel);
  }
  cudaFree(a), cudaFree(b), cudaFree(out), cudaFree(bias), cudaFree(sa), cudaFree(sb);
  cudaFree(ws);
  return tflops;
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  using P = gemm::Path;
  int failed = 0;
  // ---- correctness: odd shapes, every path, type, scale kind, split
  std::vector<Case> checks;
  for (P path : {P::kSm80, P::kSm90}) {
    for (Elem in : {Elem::kBF16, Elem::kF16}) {
      for (int m : {1, 7, 64, 100, 200, 1000}) {
        checks.push_back({m, 200, 328, in, in, path, Scale::kNone, m % 2 == 1, 0});
        checks.push_back({m, 264, 520, in, Elem::kF32, path, Scale::kNone, true, 3});
      }
      checks.push_back(
          {300, 520, 1000, in, in, path, Scale::kNone, true, 1, gemm::BLayout::kNK, 24});
    }
  }
  for (int m : {1, 100, 777}) {
    checks.push_back({m, 136, 264, Elem::kBF16, Elem::kBF16, P::kSm80, Scale::kNone, true, 0,
                      gemm::BLayout::kKN});
  }
  for (Scale s : {Scale::kTensor, Scale::kRow, Scale::kBlock}) {
    for (int m : {1, 7, 64, 100, 300}) {
      checks.push_back({m, 272, 400, Elem::kE4M3, Elem::kBF16, P::kAuto, s, m % 2 == 0, 0});
      checks.push_back({m, 384, 1024, Elem::kE4M3, Elem::kF32, P::kAuto, s, true, 2});
    }
  }
  checks.push_back({513, 1032, 2056, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 0});
  checks.push_back({2048, 2048, 2048, Elem::kBF16, Elem::kBF16, P::kSm90, Scale::kNone, false, 0});
  checks.push_back({2048, 2048, 2048, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, false, 0});
  checks.push_back({5, 8, 0, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, true, 0});
  // the GEMV kernel (m <= 4, kernel left to the dispatcher): k off its unrolled step, a's pitch
  for (Elem in : {Elem::kBF16, Elem::kF16}) {
    for (int m : {1, 2, 3, 4}) {
      checks.push_back({m, 200, 1000, in, in, P::kAuto, Scale::kNone, m % 2 == 1, 0});
      checks.push_back({m, 1032, 4104, in, Elem::kF32, P::kAuto, Scale::kNone, true, 0,
                        gemm::BLayout::kNK, 16});
    }
  }
  // stream-K (sm90.h, StreamKUnits): unsplit, fewer units than SMs (tiles over 3-4 blocks each),
  // and a whole round before the spread units (the shapes of tests/test_gemm.py's STREAM_K)
  for (Elem in : {Elem::kBF16, Elem::kF16}) {
    checks.push_back({1000, 1032, 4104, in, in, P::kSm90, Scale::kNone, true, 1});
    checks.push_back({1000, 1032, 4104, in, Elem::kF32, P::kSm90, Scale::kNone, true, 1});
    checks.push_back({4800, 1024, 2800, in, in, P::kSm90, Scale::kNone, true, 1});
  }
  for (Scale s : {Scale::kTensor, Scale::kRow}) {
    checks.push_back({1000, 1040, 7168, Elem::kE4M3, Elem::kBF16, P::kAuto, s, true, 1});
    checks.push_back({4800, 1024, 6144, Elem::kE4M3, Elem::kBF16, P::kAuto, s, false, 1});
  }
  checks.push_back({1000, 1040, 6144, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, true, 1});
  checks.push_back({2300, 1152, 4096, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, false, 1});
  for (const Case& c : checks) {
    bool ok;
    Run(c, true, 0, &ok);
    failed += !ok;
  }
  std::printf("checks: %d failed of %zu\n", failed, checks.size());
  if (quick) return failed != 0;
  const bool variants_only = argc > 1 && std::strcmp(argv[1], "--variants") == 0;
  // ---- timing
  std::vector<Case> timed = {
      {8192, 8192, 8192, Elem::kBF16, Elem::kBF16, P::kSm90, Scale::kNone, false, 1},
      {8192, 8192, 8192, Elem::kF16, Elem::kF16, P::kSm90, Scale::kNone, false, 1},
      {4096, 4096, 4096, Elem::kF16, Elem::kF16, P::kSm90, Scale::kNone, false, 1},
      {16384, 8192, 2048, Elem::kF16, Elem::kF16, P::kSm90, Scale::kNone, false, 1},
      {8192, 8192, 8192, Elem::kBF16, Elem::kBF16, P::kSm80, Scale::kNone, false, 1},
      {8192, 8192, 8192, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kTensor, false, 1},
      {8192, 8192, 8192, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kRow, false, 1},
      {8192, 8192, 8192, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, false, 1},
  };
  for (int m : {1, 4, 16, 64}) {
    for (int k : {8192, 28672}) {
      timed.push_back({m, 8192, k, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 0});
      timed.push_back({m, 8192, k, Elem::kBF16, Elem::kBF16, P::kSm80, Scale::kNone, false, 0});
      if (m <= gemm::kGemvMaxRows) {  // the wgmma tiles that m <= 4 took before the GEMV kernel
        timed.push_back({m, 8192, k, Elem::kBF16, Elem::kBF16, P::kSm90, Scale::kNone, false, 0});
      }
      timed.push_back({m, 8192, k, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kRow, false, 0});
    }
  }
  for (const Case& c : timed) {
    if (variants_only) break;
    bool ok;
    Run(c, false, c.m >= 4096 ? 20 : 200, &ok);
  }
  // ---- tile variants, called directly (checked, then timed)
  DeviceProps props;
  CHECK(GetDeviceProps(&props));
  using B16 = __nv_bfloat16;
  const std::vector<std::pair<const char*, Launch>> variants = {
      {"sm80 128x256x4",
       [&](const Params& p) {
         return gemm::LaunchSm80<gemm::Sm80Tile<128, 256, 2, 4, 4>, B16, B16>(p, 0, props);
       }},
      {"sm80 256x128x3",
       [&](const Params& p) {
         return gemm::LaunchSm80<gemm::Sm80Tile<256, 128, 4, 2, 3>, B16, B16>(p, 0, props);
       }},
      {"sm90 2x256x4",
       [&](const Params& p) {
         return gemm::LaunchSm90<gemm::Sm90Tile<B16, 2, 256, 4, false>, B16>(p, 0, props);
       }},
      {"sm90 2x256x4 c2",
       [&](const Params& p) {
         return gemm::LaunchSm90<gemm::Sm90Tile<B16, 2, 256, 4, false, 2>, B16>(p, 0, props);
       }},
      {"sm90 2x256x4 c2 ord",
       [&](const Params& p) {
         return gemm::LaunchSm90<gemm::Sm90Tile<B16, 2, 256, 4, false, 2, true>, B16>(p, 0,
                                                                                     props);
       }},
  };
  using F8 = __nv_fp8_e4m3;
  const std::vector<std::pair<const char*, Launch>> fp8_variants = {
      {"f8 2x256x4",
       [&](const Params& p) {
         return gemm::LaunchSm90<gemm::Sm90Tile<F8, 2, 256, 4, false>, B16>(p, 0, props);
       }},
      {"f8 2x256x4 c2",
       [&](const Params& p) {
         return gemm::LaunchSm90<gemm::Sm90Tile<F8, 2, 256, 4, false, 2>, B16>(p, 0, props);
       }},
  };
  const std::vector<std::pair<const char*, Launch>> block_variants = {
      {"f8b 2x128x6",
       [&](const Params& p) {
         return gemm::LaunchSm90<gemm::Sm90Tile<F8, 2, 128, 6, true>, B16>(p, 0, props);
       }},
      {"f8b 2x128x6 ord",
       [&](const Params& p) {
         return gemm::LaunchSm90<gemm::Sm90Tile<F8, 2, 128, 6, true, 1, true>, B16>(p, 0, props);
       }},
  };
  for (const auto& [label, launch] : fp8_variants) {
    for (Scale sc : {Scale::kTensor, Scale::kRow}) {
      for (Case c : {Case{1000, 1040, 528, Elem::kE4M3, Elem::kBF16, P::kAuto, sc, true, 1},
                     Case{300, 2064, 1040, Elem::kE4M3, Elem::kBF16, P::kAuto, sc, true, 1},
                     Case{8192, 8192, 8192, Elem::kE4M3, Elem::kBF16, P::kAuto, sc, false, 1},
                     Case{4096, 4096, 4096, Elem::kE4M3, Elem::kBF16, P::kAuto, sc, false, 1}}) {
        bool ok;
        Run(c, c.m <= 3000, c.m <= 3000 ? 0 : 20, &ok, label, launch);
        failed += !ok;
      }
    }
  }
  for (const auto& [label, launch] : block_variants) {
    for (Case c :
         {Case{1000, 1040, 528, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, true, 1},
          Case{300, 2064, 1040, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, true, 1},
          Case{8192, 8192, 8192, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, false, 1},
          Case{4096, 4096, 4096, Elem::kE4M3, Elem::kBF16, P::kAuto, Scale::kBlock, false, 1}}) {
      bool ok;
      Run(c, c.m <= 3000, c.m <= 3000 ? 0 : 20, &ok, label, launch);
      failed += !ok;
    }
  }
  for (const auto& [label, launch] : variants) {
    if (variants_only && label[1] == 'm' && label[3] == '8') continue;  // sm80 ones
    for (Case c :
         {Case{1000, 1032, 520, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, true, 1},
          Case{300, 2056, 1000, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, true, 1},
          Case{3000, 2056, 1000, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, true, 1},
          Case{8192, 8192, 8192, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 1},
          Case{4096, 4096, 4096, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 1},
          Case{16384, 8192, 2048, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 1},
          Case{8192, 4096, 4096, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 1},
          Case{8192, 6144, 4096, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 1},
          Case{8192, 4096, 14336, Elem::kBF16, Elem::kBF16, P::kAuto, Scale::kNone, false, 1}}) {
      bool ok;
      Run(c, c.m <= 3000, c.m <= 3000 ? 0 : 20, &ok, label, launch);
      failed += !ok;
    }
  }
  return failed != 0;
}
