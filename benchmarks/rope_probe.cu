// A standalone check-and-time probe of the RoPE kernel variants (include/xkernels/rope.h,
// rope::kVariants and rope::Plan), with no Python: every variant and layout against a reference
// kernel (bit for bit against the first variant; within 1 bf16 ulp of the reference, whose sums
// run in another order), then the time of each at Llama 3 8B's q/k (views of a packed bf16 qkv
// [T, (32 + 2 * 8) * 128], llama3 scaling) and Qwen3's QK norm + RoPE. For kernel work on the
// device, before the full test suite:
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I include \
//       benchmarks/rope_probe.cu -o /tmp/rope_probe && /tmp/rope_probe [--all] [--check-only]
//
// --plans lists the layouts tried at each T, without a GPU (an H100's 132 SMs).
// Timing: CUDA graphs of 50 launches over rotating input sets (>= 3 sets and > 150 MB where a
// set fits in the L2, so T = 4096 is read from DRAM as in xkernels bench), the median of 7
// replays. GB/s: q and k read and written + the positions, as bench_rope. By default the table
// shows, per case, the 8 fastest layouts and the first version; --all shows every one.
#define XKERNELS_ROPE_VARIANTS (~0u)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe.h"
#include "xkernels/rope.h"

using namespace xkernels;
using B16 = __nv_bfloat16;

__global__ void FillPos(int32_t* p, int64_t n, uint64_t seed, int max_pos) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<int32_t>(ProbeHash(seed, i) % static_cast<uint64_t>(max_pos));
  }
}

// One thread per (token, head): the norm's sum in order, then each pair rotated with the
// kernel's expressions (cos_sin of the same hi + lo frequencies).
struct RefParams {
  const B16 *q, *k, *qw, *kw;
  B16 *q_out, *k_out;
  const int32_t* pos;
  int64_t tokens, q_row, k_row;  // elements per token
  int hq, hk, d, half;
  bool interleaved, norm;
  float eps;
  float2 freq[rope::kMaxFreqs];
};

__global__ void Reference(const __grid_constant__ RefParams p) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= p.tokens * (p.hq + p.hk)) return;
  const int64_t t = i / (p.hq + p.hk);
  const int h = static_cast<int>(i % (p.hq + p.hk));
  const bool is_q = h < p.hq;
  const B16* x = is_q ? p.q + t * p.q_row + h * p.d : p.k + t * p.k_row + (h - p.hq) * p.d;
  B16* y = is_q ? p.q_out + t * p.q_row + h * p.d : p.k_out + t * p.k_row + (h - p.hq) * p.d;
  const B16* w = is_q ? p.qw : p.kw;
  float scale = 1.f;
  if (p.norm) {
    float ss = 0.f;
    for (int j = 0; j < p.d; ++j) ss = fmaf(__bfloat162float(x[j]), __bfloat162float(x[j]), ss);
    scale = rsqrtf(fmaf(ss, 1.f / static_cast<float>(p.d), p.eps));
  }
  auto in = [&](int j) {
    const float v = __bfloat162float(x[j]);
    return p.norm ? v * scale * __bfloat162float(w[j]) : v;
  };
  const float pos = static_cast<float>(p.pos[t]);
  for (int f = 0; f < p.half; ++f) {
    const int a = p.interleaved ? 2 * f : f, b = p.interleaved ? 2 * f + 1 : f + p.half;
    const float2 c = rope::cos_sin(pos, p.freq[f]);
    const float xa = in(a), xb = in(b);
    const float2 r = rope::rotate(xa, xb, c);
    y[a] = __float2bfloat16(r.x);
    y[b] = __float2bfloat16(r.y);
  }
  for (int j = 2 * p.half; j < p.d; ++j) y[j] = __float2bfloat16(in(j));
}

// Bf16 ulps between a and b (as ordered integers), the largest over n; *bitdiff: elements that
// differ at all.
__global__ void Ulps(const B16* a, const B16* b, int64_t n, int* max_ulp,
                     unsigned long long* bitdiff) {
  int m = 0;
  unsigned long long nd = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int x = __bfloat16_as_short(a[i]), y = __bfloat16_as_short(b[i]);
    x = x < 0 ? static_cast<int>(0x8000) - x : x;  // sign-magnitude to ordered
    y = y < 0 ? static_cast<int>(0x8000) - y : y;
    const int u = abs(x - y);
    nd += u != 0;
    m = max(m, u);
  }
  atomicMax(max_ulp, m);
  atomicAdd(bitdiff, nd);
}

struct Shape {  // the packed qkv's heads; rotary dims; the rope
  int hq, hk, d, rotary;
  bool interleaved, norm;
  rope::Config cfg;
};

rope::Config Llama3() {
  rope::Config c;
  c.theta = 500000.0, c.rope_scale = 8.0, c.low_freq_factor = 1.0, c.high_freq_factor = 4.0;
  c.original_max_position = 8192.0;
  return c;
}

rope::Problem MakeProblem(const Shape& s, B16* qkv, const int32_t* pos, const B16* w,
                          int64_t tokens) {
  const int64_t row = static_cast<int64_t>(s.hq + 2 * s.hk) * s.d;
  rope::Problem p;
  p.q = p.q_out = qkv;
  p.k = p.k_out = qkv + static_cast<int64_t>(s.hq) * s.d;
  p.positions = pos;
  if (s.norm) p.q_weight = w, p.k_weight = w + s.d;
  p.tokens = tokens;
  p.num_qo_heads = s.hq, p.num_kv_heads = s.hk, p.head_dim = s.d;
  p.q_rows = p.k_rows = p.q_out_rows = p.k_out_rows = row;
  p.pos_rows = 1;
  p.q_stride_h = p.k_stride_h = p.q_out_stride_h = p.k_out_stride_h = s.d;
  p.eps = 1e-6f;
  p.rope = s.cfg;
  p.rope.rotary_dim = s.rotary;
  p.rope.interleaved = s.interleaved;
  return p;
}

std::string PlanName(const rope::Plan& pl) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%-9s h%d s%d t%d", rope::kVariants[pl.variant].name, pl.hpt,
                pl.splits, pl.threads);
  return buf;
}

// The layouts tried at `tokens`: every variant with the first rule, then heads per thread, splits
// (few tokens) and block sizes. Plans that give the same layout are dropped.
std::vector<rope::Plan> Plans(const rope::Problem& pr, const DeviceProps& props) {
  std::vector<rope::Plan> out;
  std::vector<std::vector<int64_t>> seen;
  for (int var = 0; var < rope::kNumVariants; ++var) {
    for (int hpt : {0, 1, 2, 4, 8}) {
      for (int splits : {1, 2, 4, 8}) {
        if (splits > 1 && pr.tokens > 512) continue;
        for (int threads : {256, 128, 64}) {
          const rope::Plan pl{var, hpt, splits, threads};
          rope::KernelParams<B16, B16> kp;
          int v, u;
          if (rope::Prepare<B16, B16>(pr, pl, props, &kp, &v, &u) != cudaSuccess) continue;
          const std::vector<int64_t> key = {var, kp.groups, kp.heads_per_thread, kp.tpb,
                                            kp.heads_per_block};
          if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
          seen.push_back(key);
          out.push_back(pl);
        }
      }
    }
  }
  return out;
}

// Checks every variant and layout of `s` at `tokens` against the reference. Returns failures.
int Check(const Shape& s, int64_t tokens, const DeviceProps& props) {
  const int64_t row = static_cast<int64_t>(s.hq + 2 * s.hk) * s.d, n = tokens * row;
  B16 *src, *work, *ref, *first, *w;
  int32_t* pos;
  CHECK(cudaMalloc(&src, n * 2));
  CHECK(cudaMalloc(&work, n * 2));
  CHECK(cudaMalloc(&ref, n * 2));
  CHECK(cudaMalloc(&first, n * 2));
  CHECK(cudaMalloc(&w, 2 * s.d * 2));
  CHECK(cudaMalloc(&pos, tokens * 4));
  FillB16<<<256, 256>>>(src, n, 11 + tokens, -2.f, 2.f);
  FillB16<<<1, 256>>>(w, 2 * s.d, 5, 0.6f, 1.4f);
  FillPos<<<64, 256>>>(pos, tokens, 3 + tokens, 1 << 20);
  RefParams rp;
  rp.q = src, rp.k = src + s.hq * s.d, rp.qw = w, rp.kw = w + s.d;
  rp.q_out = ref, rp.k_out = ref + s.hq * s.d, rp.pos = pos;
  rp.tokens = tokens, rp.q_row = rp.k_row = row, rp.hq = s.hq, rp.hk = s.hk, rp.d = s.d;
  rp.half = s.rotary / 2, rp.interleaved = s.interleaved, rp.norm = s.norm, rp.eps = 1e-6f;
  rope::Config cfg = s.cfg;
  cfg.rotary_dim = s.rotary;
  rope::FillFreqs(cfg, rp.freq);
  CHECK(cudaMemcpy(ref, src, n * 2, cudaMemcpyDeviceToDevice));  // v stays as it is
  const int64_t work_items = tokens * (s.hq + s.hk);
  Reference<<<static_cast<unsigned>((work_items + 127) / 128), 128>>>(rp);
  CHECK(cudaGetLastError());
  int *d_ulp, ulp;
  unsigned long long *d_diff, diff;
  CHECK(cudaMalloc(&d_ulp, 4));
  CHECK(cudaMalloc(&d_diff, 8));
  auto compare = [&](const B16* a, const B16* b) {
    CHECK(cudaMemset(d_ulp, 0, 4));
    CHECK(cudaMemset(d_diff, 0, 8));
    Ulps<<<256, 256>>>(a, b, n, d_ulp, d_diff);
    CHECK(cudaMemcpy(&ulp, d_ulp, 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&diff, d_diff, 8, cudaMemcpyDeviceToHost));
  };
  int failed = 0, checked = 0, worst_ulp = 0;
  const rope::Problem pr = MakeProblem(s, work, pos, w, tokens);
  bool have_first = false;
  for (const rope::Plan& pl : Plans(pr, props)) {
    CHECK(cudaMemcpy(work, src, n * 2, cudaMemcpyDeviceToDevice));
    const cudaError_t e = ApplyRope<B16, B16>(pr, pl, 0);
    CHECK(cudaDeviceSynchronize());
    bool ok = e == cudaSuccess;
    unsigned long long vs_first = 0;
    if (ok) {
      compare(work, ref);
      ok = ulp <= 1;
      worst_ulp = std::max(worst_ulp, ulp);
      if (!have_first) {  // the first plan is base h0 s1 t256: the others must match it exactly
        CHECK(cudaMemcpy(first, work, n * 2, cudaMemcpyDeviceToDevice));
        have_first = true;
      } else {
        compare(work, first);
        vs_first = diff;
        ok = ok && diff == 0;
      }
    }
    ++checked;
    if (!ok) {
      ++failed;
      std::printf(
          "FAIL %s T=%lld hq=%d hk=%d d=%d rot=%d il=%d norm=%d: %s, %d ulp vs ref, %llu "
          "elements differ from the first\n",
          PlanName(pl).c_str(), static_cast<long long>(tokens), s.hq, s.hk, s.d, s.rotary,
          s.interleaved, s.norm, cudaGetErrorName(e), ulp, vs_first);
    }
  }
  std::printf(
      "check T=%-5lld hq=%d hk=%d d=%d rot=%d il=%d norm=%d: %d layouts, %d failed, "
      "max %d ulp vs reference\n",
      static_cast<long long>(tokens), s.hq, s.hk, s.d, s.rotary, s.interleaved, s.norm, checked,
      failed, worst_ulp);
  cudaFree(src), cudaFree(work), cudaFree(ref), cudaFree(first), cudaFree(w), cudaFree(pos);
  cudaFree(d_ulp), cudaFree(d_diff);
  return failed;
}

struct Row {
  std::string name;
  bool first;
  double us, gbps;
};

// Times every layout of `s` at `tokens` (in place, rotating sets). `arena`: >= arena_bytes.
void Time(const Shape& s, int64_t tokens, const DeviceProps& props, char* arena,
          int64_t arena_bytes, bool all, cudaStream_t stream) {
  constexpr int kLaunches = 50, kReplays = 7;
  constexpr int64_t kL2Multiple = 150ll << 20;
  const int64_t row = static_cast<int64_t>(s.hq + 2 * s.hk) * s.d;
  const int64_t set_bytes = ((tokens * row * 2 + tokens * 4 + 2 * s.d * 2) + 255) / 256 * 256;
  int sets = static_cast<int>(std::min<int64_t>(kLaunches, (kL2Multiple + set_bytes) / set_bytes));
  sets = std::max(sets, 3);
  while (sets > 1 && sets * set_bytes > arena_bytes) --sets;
  std::vector<rope::Problem> prs;
  for (int i = 0; i < sets; ++i) {
    char* base = arena + i * set_bytes;
    B16* qkv = reinterpret_cast<B16*>(base);
    int32_t* pos = reinterpret_cast<int32_t*>(base + tokens * row * 2);
    B16* w = reinterpret_cast<B16*>(base + tokens * row * 2 + tokens * 4);
    FillB16<<<1024, 256>>>(qkv, tokens * row, 100 + i, -2.f, 2.f);
    FillPos<<<64, 256>>>(pos, tokens, 200 + i, 8192);
    FillB16<<<1, 256>>>(w, 2 * s.d, 7, 0.6f, 1.4f);
    prs.push_back(MakeProblem(s, qkv, pos, w, tokens));
  }
  CHECK(cudaDeviceSynchronize());
  const double bytes = 2.0 * tokens * (s.hq + s.hk) * s.d * 2 + 4.0 * tokens;
  std::vector<Row> rows;
  for (const rope::Plan& pl : Plans(prs[0], props)) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) CHECK((ApplyRope<B16, B16>(prs[i % sets], pl, stream)));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaGraphLaunch(exec, stream));  // warm up
    std::vector<float> ms(kReplays);
    for (float& m : ms) {
      CHECK(cudaEventRecord(e0, stream));
      CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaEventRecord(e1, stream));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaEventElapsedTime(&m, e0, e1));
    }
    std::sort(ms.begin(), ms.end());
    const double us = ms[kReplays / 2] * 1e3 / kLaunches;
    rows.push_back({PlanName(pl), rows.empty(), us, bytes / (us * 1e-6) / 1e9});
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
  }
  const double first_us = rows[0].us;
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.us < b.us; });
  std::printf("%s T=%lld (%d sets of %.1f MB, %zu layouts)\n",
              s.norm ? "qk_norm_rope" : "apply_rope", static_cast<long long>(tokens), sets,
              set_bytes / 1e6, rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!all && i >= 8 && !rows[i].first) continue;
    std::printf("  %-26s T=%-6lld %8.2f us %7.0f GB/s  %5.2fx%s\n", rows[i].name.c_str(),
                static_cast<long long>(tokens), rows[i].us, rows[i].gbps, first_us / rows[i].us,
                rows[i].first ? "  (current)" : "");
  }
}

int main(int argc, char** argv) {
  bool all = false, check_only = false, plans_only = false;
  for (int i = 1; i < argc; ++i) {
    all |= std::strcmp(argv[i], "--all") == 0;
    check_only |= std::strcmp(argv[i], "--check-only") == 0;
    plans_only |= std::strcmp(argv[i], "--plans") == 0;
  }
  const Shape llama{32, 8, 128, 128, false, false, Llama3()};
  rope::Config qwen_cfg;
  qwen_cfg.theta = 1000000.0;
  const Shape qwen{32, 8, 128, 128, false, true, qwen_cfg};
  DeviceProps props;
  if (plans_only) {  // host only: the layouts each T gets
    props.sm_count = 132, props.cc_major = 9;
    alignas(16) static B16 fake[16];
    for (int64_t t : {1, 128, 4096, 32768}) {
      const rope::Problem pr = MakeProblem(llama, fake, nullptr, nullptr, t);
      const std::vector<rope::Plan> plans = Plans(pr, props);
      std::printf("T=%lld: %zu layouts\n", static_cast<long long>(t), plans.size());
      for (const rope::Plan& pl : plans) {
        rope::KernelParams<B16, B16> kp;
        int v, u;
        CHECK((rope::Prepare<B16, B16>(pr, pl, props, &kp, &v, &u)));
        std::printf(
            "  %-26s vec %d units %d lanes %d groups %2d hpt %2d tpb %2d heads/block %2d "
            "grid %lld x %d, %d threads\n",
            PlanName(pl).c_str(), v, u, kp.lanes, kp.groups, kp.heads_per_thread, kp.tpb,
            kp.heads_per_block, static_cast<long long>(ceil_div<int64_t>(t, kp.tpb)),
            ceil_div(kp.heads, kp.heads_per_block), kp.lanes * kp.groups * kp.tpb);
      }
    }
    return 0;
  }
  CHECK(GetDeviceProps(&props));
  // ---- correctness: the timed shapes at odd token counts, partial rotary, interleaved, small
  // heads (fewer lanes), and heads that are not a multiple of anything
  int failed = 0;
  const std::vector<Shape> shapes = {
      llama,
      qwen,
      {32, 8, 128, 64, false, false, Llama3()},  // partial rotary: a tail
      {32, 8, 128, 96, true, true, qwen_cfg},    // interleaved, tail, norm
      {16, 2, 64, 64, false, true, qwen_cfg},    // 4 lanes per head
      {7, 3, 256, 256, false, false, qwen_cfg},  // 16 lanes, odd heads
      {12, 4, 80, 80, true, false, Llama3()},    // 80: 16-byte vectors, 5 lanes
      {5, 1, 22, 22, false, true, qwen_cfg},     // single elements
  };
  for (const Shape& s : shapes) {
    for (int64_t t : {1, 3, 37, 300}) failed += Check(s, t, props);
  }
  failed += Check(llama, 5000, props);
  failed += Check(qwen, 5000, props);
  std::printf("checks: %d failed\n", failed);
  if (check_only) return failed != 0;
  // ---- timing
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int64_t arena_bytes = 440ll << 20;  // T = 32768: one set of 403 MB; 4096: four of 50
  char* arena;
  CHECK(cudaMalloc(&arena, arena_bytes));
  for (int64_t t : {1, 128, 4096, 32768}) Time(llama, t, props, arena, arena_bytes, all, stream);
  for (int64_t t : {128, 4096, 32768}) Time(qwen, t, props, arena, arena_bytes, all, stream);
  cudaFree(arena);
  return failed != 0;
}
