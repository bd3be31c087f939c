// A register vector of N elements, loaded and stored in 16-byte accesses where its size allows.
#ifndef XKERNELS_VEC_H_
#define XKERNELS_VEC_H_

#include "xkernels/dtypes.h"

namespace xkernels {

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
