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
#define NGRA_PREFETCH_LAMBDA __attribute__((always_inline))  // the same, for a lambda

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

// tanh for float: x P(x^2) / Q(x^2) on x clamped to [-9, 9] (past 9, tanh
// rounds to +-1 in float), P and Q of degree 4, fitted to tanh by iterated
// weighted least squares on the relative error (2e-8 in double; within 7 ulp
// once evaluated in float). Half the time of 1 - 2 / (e^2|x| + 1) beside a
// polynomial near 0, which computed both and the exp: a tanh gate's walks
// spend their time here.
__attribute__((always_inline)) inline float HostTanhFloat(float x) {
  const float c = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);
  const float z = c * c;
  float p = 1.33550051e-8f;
  p = p * z + 2.06093573e-5f;
  p = p * z + 3.49560613e-3f;
  p = p * z + 1.33810416e-1f;
  p = p * z + 1.0f;
  float q = 7.77670721e-7f;
  q = q * z + 3.28566355e-4f;
  q = q * z + 2.58770529e-2f;
  q = q * z + 4.67143565e-1f;
  q = q * z + 1.0f;
  const float y = c * p / q;
  return x != x ? x : y;
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
