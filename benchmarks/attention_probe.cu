// A standalone check-and-time probe of the attention prefill kernels (include/xkernels/attention/),
// with no Python: each sm90 kernel version against the cp.async kernel's output on the benchmark
// shapes and short batches, then us and TFLOP/s (CUDA graphs of 20 calls, the median of 16 replays
// taken in 8 rounds over the versions, each round in another shuffled order: a version run right
// after a slower one, such as the cp.async kernel, runs up to 11% faster at s 8192 than the same
// kernel elsewhere in the round, so a fixed rotation biased the version after it; even shuffled,
// the same kernel twice in one run can differ by 2-4% at s 8192). PROBE_ROUNDS=n: n rounds;
// PROBE_D=128 (or 64): that head_dim's shapes only; PROBE_SM80=1: the cp.async kernel alone, and
// a hash of its output's bits (to compare two builds of it). For kernel work on the device, before
// the tests:
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I include \
//       benchmarks/attention_probe.cu -o /tmp/attention_probe && /tmp/attention_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "probe.h"
#include "xkernels/attention/attention.h"

using namespace xkernels;
using attention::Params;
using T = __nv_bfloat16;

__global__ void FillRandom(T* x, int64_t n, uint64_t seed) {  // ~ uniform [-2, 2)
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = __float2bfloat16(static_cast<float>(ProbeHash(seed, i) & 0xFFFF) / 16384.f - 2.f);
  }
}

using Launch = cudaError_t (*)(const Params&, cudaStream_t, const DeviceProps&);

template <class Tl, attention::Sm90Grid kHow = attention::Sm90Grid::kBlockPerTile>
cudaError_t Sm90(const Params& p, cudaStream_t s, const DeviceProps& props) {
  return attention::LaunchSm90Attention<Tl, T>(p, s, props, kHow);
}
cudaError_t Sm80(const Params& p, cudaStream_t s, const DeviceProps&) {
  Params q = p;
  q.kernel = attention::Kernel::kSm80;
  return attention::Attention<T>(q, s);
}

cudaError_t Auto(const Params& p, cudaStream_t s, const DeviceProps&) {  // as dispatched
  return attention::Attention<T>(p, s);
}

struct Version {
  const char* name;
  Launch d128, d64;
};

int main() {
  DeviceProps props;
  CHECK(GetDeviceProps(&props));
  using attention::Sm90AttnTile, attention::Sm90PrefillTile, attention::Sm90Grid;
  constexpr Sm90Grid kAuto = Sm90Grid::kAuto;
  using V1 = Sm90AttnTile<64, 4, false>;  // head_dim 64 before v7: 128 rows, v1's loop
  using V7S4 = Sm90AttnTile<64, 4, true, 128, true, true, 0, 3>;  // v7 in 4 stages
  const Version versions[] = {
      {"sm80 (cp.async)", Sm80, Sm80},
      {"dispatcher", Auto, Auto},
      {"v1 128 rows (d 64 before v7)", Auto, Sm90<V1, kAuto>},
      {"v7 4 stages", Auto, Sm90<V7S4, kAuto>},
      {"v7 block per tile", Auto, Sm90<Sm90PrefillTile<64>, Sm90Grid::kBlockPerTile>},
  };
  constexpr int kVersions = sizeof(versions) / sizeof(versions[0]);
  struct Shape {
    int b, s, hq, hkv, d;
  };
  const Shape shapes[] = {{1, 8192, 32, 32, 128}, {1, 4096, 32, 8, 128},  {1, 8192, 16, 16, 64},
                          {8, 1024, 32, 8, 128},  {16, 1024, 32, 8, 128}, {8, 1024, 32, 32, 128},
                          {1, 16384, 32, 8, 128}, {2, 2048, 32, 8, 128},  {8, 1024, 32, 8, 64},
                          {4, 8192, 32, 8, 128},  {1, 16384, 16, 16, 64}, {4, 2048, 32, 8, 64},
                          {8, 1000, 32, 8, 64},   {16, 500, 32, 8, 64},   {8, 1000, 32, 8, 128}};
  ProbeRig rig;
  const cudaStream_t stream = rig.stream;
  for (const Shape& sh : shapes) {
    if (std::getenv("PROBE_D") != nullptr && sh.d != std::atoi(std::getenv("PROBE_D"))) continue;
    const int64_t nq = int64_t{sh.b} * sh.s * sh.hq * sh.d,
                  nkv = int64_t{sh.b} * sh.s * sh.hkv * sh.d;
    T *q, *k, *v, *ref, *out;
    CHECK(cudaMalloc(&q, nq * 2));
    CHECK(cudaMalloc(&k, nkv * 2));
    CHECK(cudaMalloc(&v, nkv * 2));
    CHECK(cudaMalloc(&ref, nq * 2));
    CHECK(cudaMalloc(&out, nq * 2));
    FillRandom<<<1024, 256>>>(q, nq, 1);
    FillRandom<<<1024, 256>>>(k, nkv, 2);
    FillRandom<<<1024, 256>>>(v, nkv, 3);
    for (int causal = 0; causal < 2; ++causal) {
      Params p;
      p.q = q, p.k = k, p.v = v;
      p.q_stride_t = int64_t{sh.hq} * sh.d, p.q_stride_h = sh.d, p.q_stride_b = sh.s * p.q_stride_t;
      p.k_stride_t = p.v_stride_t = int64_t{sh.hkv} * sh.d, p.k_stride_h = p.v_stride_h = sh.d;
      p.k_stride_b = p.v_stride_b = sh.s * p.k_stride_t;
      p.out_stride_t = p.q_stride_t, p.out_stride_h = sh.d, p.out_stride_b = p.q_stride_b;
      p.q_len = p.kv_len = sh.s, p.total_q = int64_t{sh.b} * sh.s;
      p.batch = sh.b, p.num_qo_heads = sh.hq, p.num_kv_heads = sh.hkv, p.head_dim = sh.d;
      p.sm_scale = 1.f / std::sqrt(static_cast<float>(sh.d));
      p.causal = causal;
      const double flops = 4.0 * sh.b * sh.s * sh.s * sh.hq * sh.d / (causal ? 2 : 1);
      float err[kVersions] = {};
      const int nver = std::getenv("PROBE_SM80") ? 1 : kVersions;  // the cp.async kernel alone
      std::vector<cudaGraphExec_t> graphs(nver);
      const int calls = 20;  // per graph
      for (int vi = 0; vi < nver; ++vi) {
        const Launch f = sh.d == 128 ? versions[vi].d128 : versions[vi].d64;
        p.out = vi == 0 ? ref : out;
        CHECK(cudaMemsetAsync(p.out, 0xFF, nq * 2, stream));  // poison: NaN
        CHECK(f(p, stream, props));
        CHECK(cudaStreamSynchronize(stream));
        if (vi > 0) err[vi] = rig.MaxDiff(out, ref, nq);
        graphs[vi] = rig.Capture(calls, [&](cudaStream_t st) { return f(p, st, props); });
      }
      if (std::getenv("PROBE_SM80")) {  // the output's bits, to compare builds
        std::vector<uint16_t> h(nq);
        CHECK(cudaMemcpy(h.data(), ref, nq * 2, cudaMemcpyDeviceToHost));
        uint64_t x = 1469598103934665603ull;
        for (uint16_t e : h) x = (x ^ e) * 1099511628211ull;
        std::printf("b=%d s=%d hq=%d hkv=%d d=%d causal=%d output hash %016llx\n", sh.b, sh.s,
                    sh.hq, sh.hkv, sh.d, causal, static_cast<unsigned long long>(x));
      }
      const int kRounds = std::getenv("PROBE_ROUNDS") ? std::atoi(std::getenv("PROBE_ROUNDS")) : 8;
      const std::vector<float> us = rig.Medians(graphs, calls, kRounds);
      for (int vi = 0; vi < nver; ++vi) {
        const float t = us[vi];
        std::printf(
            "b=%d s=%d hq=%d hkv=%d d=%d causal=%d  %-32s %8.1f us %7.1f TFLOP/s  "
            "max|diff| %.4g\n",
            sh.b, sh.s, sh.hq, sh.hkv, sh.d, causal, versions[vi].name, t, flops / t / 1e6,
            err[vi]);
      }
    }
    CHECK(cudaFree(q));
    CHECK(cudaFree(k));
    CHECK(cudaFree(v));
    CHECK(cudaFree(ref));
    CHECK(cudaFree(out));
  }
  return 0;
}
