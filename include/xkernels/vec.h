// A register vector of N elements, loaded and stored in 16-byte accesses where its size allows.
#ifndef XKERNELS_VEC_H_
#define XKERNELS_VEC_H_

#include "xkernels/dtypes.h"

namespace xkernels {

// L2 eviction priorities for Vec::load_evict (sm_80+): an L2 access policy covering the whole
// access (createpolicy.fractional, fraction 1.0).
enum class Evict { kFirst, kLast };
template <Evict E>
XK_DEVICE uint64_t l2_policy() {
  uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (E == Evict::kLast) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  }
#endif
  return p;
}

// Alignment of a Vec<T, N>: its size up to 16 bytes. Pointers handed to load/store must have it
// (launchers check, and fall back to N = 1 when they do not).
template <typename T, int N>
constexpr int vec_align() {
  return sizeof(T) * N >= 16 ? 16 : static_cast<int>(sizeof(T) * N);
}

template <typename T, int N>
struct alignas(vec_align<T, N>()) Vec {
  static_assert(N >= 1 && (N & (N - 1)) == 0, "Vec size must be a power of two");
  T data[N];

  XK_DEVICE T& operator[](int i) { return data[i]; }
  XK_DEVICE const T& operator[](int i) const { return data[i]; }

  XK_DEVICE void load(const T* p) { *this = *reinterpret_cast<const Vec*>(p); }
  XK_DEVICE void store(T* p) const { *reinterpret_cast<Vec*>(p) = *this; }

  // A load that does not allocate in L1: for data read once (rows), so that it does not evict
  // data the same SM reads again (weights, biases).
  XK_DEVICE void load_no_l1(const T* p) {
    constexpr int kBytes = sizeof(T) * N;
    if constexpr (kBytes == 16) {
      uint4 v;
      asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p));
      memcpy(data, &v, 16);
    } else if constexpr (kBytes == 8) {
      uint2 v;
      asm volatile("ld.global.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
                   : "=r"(v.x), "=r"(v.y)
                   : "l"(p));
      memcpy(data, &v, 8);
    } else if constexpr (kBytes == 4) {
      unsigned v;
      asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
      memcpy(data, &v, 4);
    } else if constexpr (kBytes == 2) {
      unsigned short v;
      asm volatile("ld.global.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
      memcpy(data, &v, 2);
    } else {
      load(p);
    }
  }

  // A 16-byte load with an L2 eviction priority (`policy`, from l2_policy<E>()) and the same
  // priority in L1: Evict::kLast for data read again soon, kFirst for its last read.
  template <Evict E>
  XK_DEVICE void load_evict(const T* p, uint64_t policy) {
    static_assert(sizeof(T) * N == 16, "16-byte vectors");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint4 v;
    if constexpr (E == Evict::kLast) {
      asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p), "l"(policy));
    } else {
      asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p), "l"(policy));
    }
    memcpy(data, &v, 16);
#else
    load(p);
#endif
  }

  // Load N elements of another type, converting to float.
  template <typename S>
  XK_DEVICE static void cast_load(float (&dst)[N], const S* p) {
    Vec<S, N> v;
    v.load(p);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = to_float(v[i]);
  }
  // Convert N floats to T and store them.
  XK_DEVICE static void cast_store(T* p, const float (&src)[N]) {
    Vec v;
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = from_float<T>(src[i]);
    v.store(p);
  }
};

// Elements per 16-byte access.
template <typename T>
constexpr int vec16() {
  return static_cast<int>(16 / sizeof(T));
}

}  // namespace xkernels

#endif  // XKERNELS_VEC_H_
