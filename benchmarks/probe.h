// What the standalone kernel probes (benchmarks/*_probe.cu) share: a CUDA error check that stops
// the probe, the hash their random inputs come from (the same inputs on every run), a bf16 fill,
// and the graph timing of the attention probes.
#ifndef XKERNELS_BENCHMARKS_PROBE_H_
#define XKERNELS_BENCHMARKS_PROBE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#define CHECK(x)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, #x); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// splitmix64's finaliser over (seed, i): 64 well-mixed bits per element index.
__device__ inline uint64_t ProbeHash(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29, x *= 0x94D049BB133111EBull, x ^= x >> 32;
  return x;
}

// p[i] uniform in [lo, hi), rounded to bf16, from ProbeHash(seed, i).
__global__ void FillB16(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(ProbeHash(seed, i) & 0xFFFFFF) / 16777216.f;
    p[i] = __float2bfloat16(lo + (hi - lo) * u);
  }
}

// max |a[i] - b[i]| over i (NaN in a: 1e30) into *out, which starts at 0 (non-negative floats
// order as their bits do).
__global__ void ProbeMaxDiff(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                             float* out) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    m = fmaxf(m, x == x ? fabsf(x - y) : 1e30f);
  }
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));
}

// The graph-timing probes' rig (attention_probe.cu, decode_probe.cu): a stream, the events and a
// device float for the output checks.
struct ProbeRig {
  cudaStream_t stream;
  cudaEvent_t e0, e1;
  float* diff;

  ProbeRig() {
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&diff, sizeof(float)));
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
  }

  // max |a - b| over n bf16 values (NaN in a: 1e30)
  float MaxDiff(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n) {
    CHECK(cudaMemsetAsync(diff, 0, sizeof(float), stream));
    ProbeMaxDiff<<<1024, 256, 0, stream>>>(a, b, n, diff);
    float h = 0.f;
    CHECK(cudaMemcpyAsync(&h, diff, sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    return h;
  }

  // A graph of `calls` calls of launch(stream), replayed once (warm-up).
  template <class F>
  cudaGraphExec_t Capture(int calls, F&& launch) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int r = 0; r < calls; ++r) CHECK(launch(stream));
    CHECK(cudaStreamEndCapture(stream, &g));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphLaunch(exec, stream));
    return exec;
  }

  // us per call of each graph (of `calls` calls): the median of two replays in each of `rounds`
  // rounds over the graphs, each round in another shuffled order (clock and power drift fall on
  // all of them alike, and none always runs after another: a kernel right after a slower one can
  // run faster). The graphs are destroyed.
  std::vector<float> Medians(std::vector<cudaGraphExec_t>& graphs, int calls, int rounds) {
    const int n = static_cast<int>(graphs.size());
    std::vector<std::vector<float>> us(n);
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(12345);
    for (int round = 0; round < rounds; ++round) {
      std::shuffle(order.begin(), order.end(), rng);
      for (int i : order) {
        for (int r = 0; r < 2; ++r) {
          CHECK(cudaEventRecord(e0, stream));
          CHECK(cudaGraphLaunch(graphs[i], stream));
          CHECK(cudaEventRecord(e1, stream));
          CHECK(cudaEventSynchronize(e1));
          float ms = 0.f;
          CHECK(cudaEventElapsedTime(&ms, e0, e1));
          us[i].push_back(ms * 1e3f / calls);
        }
      }
    }
    std::vector<float> med(n);
    for (int i = 0; i < n; ++i) {
      std::sort(us[i].begin(), us[i].end());
      med[i] = us[i][us[i].size() / 2];
      CHECK(cudaGraphExecDestroy(graphs[i]));
    }
    return med;
  }
};

#endif  // XKERNELS_BENCHMARKS_PROBE_H_
