// A standalone check-and-time probe of paged decode (include/xkernels/attention/): the dispatch
// and tile variants of the cp.async kernel, each forced with 1 or 2 splits, on batches of one
// query token per request over a paged NHD cache (page 16, pages in random order, GQA 32/8,
// head_dim 128, bf16). Each variant's output against the dispatch's (max |diff|), then us and
// GB/s of the K and V bytes (CUDA graphs of 10 calls, the median of 16 replays taken in 8 rounds
// over the variants, each round in another shuffled order). The tiles' registers and blocks per
// SM are printed first (cudaFuncGetAttributes, cudaOccupancyMaxActiveBlocksPerMultiprocessor).
// PROBE_B=b: that batch only; PROBE_SET=wave: the calls whose blocks fit one wave (below).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I include \
//       benchmarks/decode_probe.cu -o /tmp/decode_probe && /tmp/decode_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "probe.h"
#include "xkernels/attention/attention.h"

using namespace xkernels;
using attention::Params;
using attention::Tile;
using T = __nv_bfloat16;

using Launch = cudaError_t (*)(Params, cudaStream_t, const DeviceProps&);

// The tile Tl over p.num_splits splits (set by the caller), merged when split.
template <class Tl>
cudaError_t Forced(Params p, cudaStream_t s, const DeviceProps& props) {
  XK_CUDA_TRY((attention::LaunchTile<Tl, T>(p, s, props)));
  return p.num_splits == 1 ? cudaSuccess : attention::MergeSplits<T>(p, s);
}
cudaError_t Auto(Params p, cudaStream_t s, const DeviceProps&) {  // as the bindings call it
  attention::Geometry g{p.batch, p.total_q, p.num_qo_heads, p.num_kv_heads, p.head_dim,
                        p.kv_indices_len * p.page_size / p.batch};  // (keys per request)
  XK_CUDA_TRY(attention::PlanSplits(g, &p.num_splits));
  return attention::Attention<T>(p, s);
}

//                     head_dim, rows, warps q x kv, keys/stage, stages, keys/step, Q in regs
using D4x64s3 = attention::DecodeTile<128>;  // the dispatch's decode tile
using D4x64s2 = Tile<128, 16, 1, 4, 64, 2, 16, true>;
using D2x32s4 = Tile<128, 16, 1, 2, 32, 4, 16, true>;
using D2x64s3 = Tile<128, 16, 1, 2, 64, 3, 32, true>;
using D2x64s2 = Tile<128, 16, 1, 2, 64, 2, 32, true>;
using D4x128s2 = Tile<128, 16, 1, 4, 128, 2, 32, true>;
using DWide = attention::DecodeWideTile<128>;  // 8 warps, 128-key stages x 3

struct Variant {
  std::string name;
  Launch f;
  int splits;  // 0: the plan's; -s: s times the plan's
  const void* kernel;
  int threads, smem;
  int plan_div = 1;  // (splits -1: the plan's divided by this, at least 1)
};

template <class Tl>
Variant V(const char* name, int splits, int plan_div = 1) {
  const std::string tag = splits > 1      ? "/" + std::to_string(splits)
                          : plan_div > 1 ? "/plan:" + std::to_string(plan_div)
                          : splits < 0   ? "/plan*" + std::to_string(-splits)
                                         : "";
  return {std::string(name) + tag, Forced<Tl>, splits,
          reinterpret_cast<const void*>(attention::AttentionKernel<Tl, T, true>), Tl::kThreads,
          Tl::kSmemBytes, plan_div};
}

int main() {
  DeviceProps props;
  CHECK(GetDeviceProps(&props));
  // PROBE_SET=wave: calls whose blocks fit one wave (batch x kv heads under the SM count, split
  // by the plan), the wide tile against the 4-warp tile at 1-3 times the plan's splits, and
  // (since the plan doubles them there) the wide tile at half the plan's
  const bool wave = std::getenv("PROBE_SET") && std::string(std::getenv("PROBE_SET")) == "wave";
  std::vector<Variant> vs = {{"dispatch", Auto, 0, nullptr, 0, 0}};
  if (wave) {
    for (int sp : {-1, -2, -3}) {
      vs.push_back(V<D4x64s3>("4w64k3s", sp));
      vs.push_back(V<DWide>("8w128k3s", sp));
    }
    // since the plan doubles one wave's splits (decode.h): the wide tile at half of them
    vs.push_back(V<DWide>("8w128k3s", -1, 2));
  }
  for (int sp : {1, 2}) {
    if (wave) break;
    vs.push_back(V<D4x64s3>("4w64k3s", sp));
    vs.push_back(V<D4x64s2>("4w64k2s", sp));
    vs.push_back(V<D2x32s4>("2w32k4s", sp));
    vs.push_back(V<D2x64s3>("2w64k3s", sp));
    vs.push_back(V<D2x64s2>("2w64k2s", sp));
    vs.push_back(V<D4x128s2>("4w128k2s", sp));
    vs.push_back(V<DWide>("8w128k3s", sp));
  }
  for (const Variant& v : vs) {
    if (v.kernel == nullptr) continue;
    void (*k)(Params) = nullptr;
    cudaFuncAttributes a;
    CHECK(cudaFuncGetAttributes(&a, v.kernel));
    k = reinterpret_cast<void (*)(Params)>(const_cast<void*>(v.kernel));
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, v.threads, v.smem));
    if (v.splits == 1) {
      std::printf("%-10s %3d threads %3d regs %6d B smem %5d B local: %d blocks per SM\n",
                  v.name.c_str(), v.threads, a.numRegs, v.smem, (int)a.localSizeBytes, per_sm);
    }
  }
  constexpr int kHq = 32, kHkv = 8, kD = 128, kPage = 16;
  struct Shape {
    int b, kv;
  };
  std::vector<Shape> shapes = {{128, 4096}, {64, 4096}, {32, 4096}, {256, 2048},
                               {256, 1024}, {16, 16384}, {96, 4096}};
  if (wave) {
    shapes = {{1, 32768}, {2, 16384}, {4, 8192}, {8, 8192}, {12, 8192}, {16, 4096},
              {16, 16384}, {8, 32768}, {4, 32768}, {1, 8192}, {16, 2048}};
  }
  ProbeRig rig;
  const cudaStream_t stream = rig.stream;
  for (const Shape& sh : shapes) {
    if (std::getenv("PROBE_B") != nullptr && sh.b != std::atoi(std::getenv("PROBE_B"))) continue;
    const int pages_per = sh.kv / kPage, pages = sh.b * pages_per;
    const int64_t nq = int64_t{sh.b} * kHq * kD, nkv = int64_t{pages} * kPage * kHkv * kD;
    T *q, *k, *v, *ref, *out;
    float* ws;
    int32_t *indptr, *indices, *last;
    CHECK(cudaMalloc(&q, nq * 2));
    CHECK(cudaMalloc(&k, nkv * 2));
    CHECK(cudaMalloc(&v, nkv * 2));
    CHECK(cudaMalloc(&ref, nq * 2));
    CHECK(cudaMalloc(&out, nq * 2));
    CHECK(cudaMalloc(&ws, attention::WorkspaceElems(128, sh.b, kHq, kD) * 4));
    FillB16<<<1024, 256>>>(q, nq, 1, -2.f, 2.f);
    FillB16<<<1024, 256>>>(k, nkv, 2, -2.f, 2.f);
    FillB16<<<1024, 256>>>(v, nkv, 3, -2.f, 2.f);
    std::vector<int32_t> h_indptr(sh.b + 1), h_indices(pages), h_last(sh.b, kPage);
    for (int b = 0; b <= sh.b; ++b) h_indptr[b] = b * pages_per;
    std::iota(h_indices.begin(), h_indices.end(), 0);
    std::shuffle(h_indices.begin(), h_indices.end(), std::mt19937(7));
    CHECK(cudaMalloc(&indptr, (sh.b + 1) * 4));
    CHECK(cudaMalloc(&indices, pages * 4));
    CHECK(cudaMalloc(&last, sh.b * 4));
    CHECK(cudaMemcpy(indptr, h_indptr.data(), (sh.b + 1) * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(indices, h_indices.data(), pages * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(last, h_last.data(), sh.b * 4, cudaMemcpyHostToDevice));
    Params p;
    p.q = q;
    p.q_stride_b = int64_t{kHq} * kD, p.q_stride_t = 0, p.q_stride_h = kD;
    p.out_stride_b = p.q_stride_b, p.out_stride_t = 0, p.out_stride_h = kD;
    p.q_len = 1, p.total_q = sh.b;
    p.kv_mode = attention::KvMode::kPaged;
    p.k = k, p.v = v;
    p.k_stride_b = p.v_stride_b = int64_t{kPage} * kHkv * kD;
    p.k_stride_t = p.v_stride_t = int64_t{kHkv} * kD;
    p.k_stride_h = p.v_stride_h = kD;
    p.kv_indptr = indptr, p.kv_indices = indices, p.kv_last_page_len = last;
    p.kv_len = pages, p.kv_indices_len = pages;
    p.page_size = kPage, p.page_div = attention::FastDiv(kPage);
    p.batch = sh.b, p.num_qo_heads = kHq, p.num_kv_heads = kHkv, p.head_dim = kD;
    p.sm_scale = 1.f / std::sqrt(static_cast<float>(kD));
    p.workspace = ws;
    const double bytes = 2.0 * nkv * 2 + 2.0 * nq * 2;
    const int nv = static_cast<int>(vs.size());
    std::vector<float> err(nv, 0.f);
    std::vector<cudaGraphExec_t> graphs(nv);
    const int calls = 10;
    attention::Geometry geo{p.batch, p.total_q, p.num_qo_heads, p.num_kv_heads, p.head_dim,
                            sh.kv};
    int32_t plan = 1;
    CHECK(attention::PlanSplits(geo, &plan));
    for (int vi = 0; vi < nv; ++vi) {
      Params pv = p;
      pv.num_splits = vs[vi].splits < 0 ? std::max(-vs[vi].splits * plan / vs[vi].plan_div, 1)
                                        : std::max(vs[vi].splits, 1);
      pv.out = vi == 0 ? ref : out;
      CHECK(cudaMemsetAsync(pv.out, 0xFF, nq * 2, stream));  // poison: NaN
      CHECK(vs[vi].f(pv, stream, props));
      CHECK(cudaStreamSynchronize(stream));
      if (vi > 0) err[vi] = rig.MaxDiff(out, ref, nq);
      graphs[vi] = rig.Capture(calls, [&](cudaStream_t s) { return vs[vi].f(pv, s, props); });
    }
    const std::vector<float> us = rig.Medians(graphs, calls, 8);
    std::printf("b %3d kv %5d (plan: %d splits):", sh.b, sh.kv, plan);
    for (int vi = 0; vi < nv; ++vi) {
      std::printf("  %s %.1f us %.0f GB/s%s", vs[vi].name.c_str(), us[vi], bytes / us[vi] / 1e3,
                  err[vi] > 2e-2f ? " DIFF" : "");
    }
    std::printf("\n");
    for (void* x : std::vector<void*>{q, k, v, ref, out, ws, indptr, indices, last}) {
      CHECK(cudaFree(x));
    }
  }
  return 0;
}
