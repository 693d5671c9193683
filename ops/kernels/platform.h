// What differs between the host compiler and nvcc, so that the framework-free
// kernel headers (segments.h, reducers.h, programs.h) compile for both.
//
// NGRA_HOST_DEVICE marks a function callable from host and device code. Under
// a host-only compiler it expands to nothing, so the CPU build is unchanged.
#ifndef NGRA_OPS_KERNELS_PLATFORM_H_
#define NGRA_OPS_KERNELS_PLATFORM_H_

#include <cmath>

#ifdef __CUDACC__
#define NGRA_HOST_DEVICE __host__ __device__
#else
#define NGRA_HOST_DEVICE
#endif

// For functions that only prefetch. __builtin_prefetch has no visible effect,
// so GCC finds such a function pure and deletes calls to it as dead code
// unless it was inlined first: every prefetch would silently vanish.
#define NGRA_PREFETCH_INLINE inline __attribute__((always_inline))

namespace ngra {

// Exp and tanh for both sides (named Math* so as not to clash with the Tanh
// activation in programs.h): device code calls CUDA's ::exp and ::tanh
// overloads; host double calls std::; host float uses the polynomial forms
// below, which GCC vectorises inside the kernels' feature loops (std::expf is
// one libm call per element: the G-GCN gate kernels ran 10x slower with it).

#ifndef __CUDACC_RTC__  // host code (NVRTC compiles device code only)
// e^x for float in plain arithmetic (Cephes expf: e^x = 2^n e^r, |r| <= ln2/2,
// degree-6 polynomial; within 2 ulp of std::exp). It overflows to inf where
// std::exp does (past 88.7228; 2^128 is applied as 2^127 * 2), gives 0 below
// -87.336 (no denormals), and keeps NaN. Branch-free, with the clamping done
// on the integer exponent: GCC's vectoriser gives up on a float clamp feeding
// a float-to-int conversion.
__attribute__((always_inline)) inline float HostExpFloat(float x) {
  const float t = x * 1.44269504088896341f;
  int whole = static_cast<int>(t + std::copysign(0.5f, t));  // round to nearest
  whole = whole < -126 ? -126 : (whole > 128 ? 128 : whole);
  const float n = static_cast<float>(whole);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int top = whole > 127 ? 1 : 0;  // 2^128 is not a float: scale by 2^127, then 2
  float result = e * __builtin_bit_cast(float, (whole - top + 127) << 23) * (1.0f + static_cast<float>(top));
  result = x > 88.72283935546875f ? HUGE_VALF : result;
  result = x < -87.3365447505531f ? 0.0f : result;
  return x != x ? x : result;
}

// tanh for float: an odd polynomial near 0 (Cephes tanhf), 1 - 2/(e^2|x| + 1) beyond.
__attribute__((always_inline)) inline float HostTanhFloat(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float big = 1.0f - 2.0f / (HostExpFloat(2.0f * a) + 1.0f);
  return a < 0.625f ? small : (x < 0.0f ? -big : big);
}
#endif  // __CUDACC_RTC__

template <typename T>
NGRA_HOST_DEVICE inline T MathExp(T x) {
#ifdef __CUDA_ARCH__
  return ::exp(x);
#else
  if constexpr (sizeof(T) == sizeof(float)) {
    return HostExpFloat(x);
  } else {
    return std::exp(x);
  }
#endif
}

template <typename T>
NGRA_HOST_DEVICE inline T MathTanh(T x) {
#ifdef __CUDA_ARCH__
  return ::tanh(x);
#else
  if constexpr (sizeof(T) == sizeof(float)) {
    return HostTanhFloat(x);
  } else {
    return std::tanh(x);
  }
#endif
}

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_PLATFORM_H_
