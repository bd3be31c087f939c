// Element types: conversion to and from float for every storage type a kernel may see.
#ifndef XKERNELS_DTYPES_H_
#define XKERNELS_DTYPES_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "xkernels/common.h"

namespace xkernels {

template <typename T>
struct DTypeTraits;

template <>
struct DTypeTraits<float> {
  static constexpr bool kLowPrecision = false;
  static XK_DEVICE float to_float(float x) { return x; }
  static XK_DEVICE float from_float(float x) { return x; }
};
template <>
struct DTypeTraits<__half> {
  static constexpr bool kLowPrecision = true;
  static XK_DEVICE float to_float(__half x) { return __half2float(x); }
  static XK_DEVICE __half from_float(float x) { return __float2half_rn(x); }
};
template <>
struct DTypeTraits<__nv_bfloat16> {
  static constexpr bool kLowPrecision = true;
  static XK_DEVICE float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static XK_DEVICE __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};
template <>
struct DTypeTraits<__nv_fp8_e4m3> {
  static constexpr bool kLowPrecision = true;
  static XK_DEVICE float to_float(__nv_fp8_e4m3 x) { return static_cast<float>(x); }
  static XK_DEVICE __nv_fp8_e4m3 from_float(float x) { return __nv_fp8_e4m3(x); }  // satfinite
};
template <>
struct DTypeTraits<__nv_fp8_e5m2> {
  static constexpr bool kLowPrecision = true;
  static XK_DEVICE float to_float(__nv_fp8_e5m2 x) { return static_cast<float>(x); }
  static XK_DEVICE __nv_fp8_e5m2 from_float(float x) { return __nv_fp8_e5m2(x); }
};

template <typename T>
XK_DEVICE float to_float(T x) {
  return DTypeTraits<T>::to_float(x);
}
template <typename T>
XK_DEVICE T from_float(float x) {
  return DTypeTraits<T>::from_float(x);
}

}  // namespace xkernels

#endif  // XKERNELS_DTYPES_H_
