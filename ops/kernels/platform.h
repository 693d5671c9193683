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

namespace ngra {

// Exp and tanh for both sides (named Math* so as not to clash with the Tanh
// activation in programs.h): device code calls CUDA's ::exp and ::tanh
// overloads; host code calls exactly the std:: functions it always did.
template <typename T>
NGRA_HOST_DEVICE inline T MathExp(T x) {
#ifdef __CUDA_ARCH__
  return ::exp(x);
#else
  return std::exp(x);
#endif
}

template <typename T>
NGRA_HOST_DEVICE inline T MathTanh(T x) {
#ifdef __CUDA_ARCH__
  return ::tanh(x);
#else
  return std::tanh(x);
#endif
}

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_PLATFORM_H_
