// The little of the C++ standard library that the kernel headers' device code
// uses, for NVRTC, which has none: ngra_tf/ops/generated.py hands this file to
// NVRTC for each standard header they include (<cstdint>, <type_traits>, ...),
// and the headers leave their host-only parts out under __CUDACC_RTC__.
#ifndef NGRA_OPS_CUDA_RTC_STD_H_
#define NGRA_OPS_CUDA_RTC_STD_H_

#ifndef __CUDACC_RTC__
#error "rtc_std.h stands in for the standard library under NVRTC only"
#endif

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;

#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define HUGE_VALF INFINITY

namespace std {
using ::int8_t;
using ::int16_t;
using ::int32_t;
using ::int64_t;
using ::uint8_t;
using ::uint16_t;
using ::uint32_t;
using ::uint64_t;
using ::size_t;
using ::ptrdiff_t;

template <typename T, T v>
struct integral_constant {
  static constexpr T value = v;
  using value_type = T;
  using type = integral_constant;
  constexpr operator T() const { return v; }
};
template <bool B>
using bool_constant = integral_constant<bool, B>;
using true_type = bool_constant<true>;
using false_type = bool_constant<false>;

template <typename A, typename B>
struct is_same : false_type {};
template <typename A>
struct is_same<A, A> : true_type {};
template <typename A, typename B>
inline constexpr bool is_same_v = is_same<A, B>::value;

template <bool B, typename A, typename C>
struct conditional {
  using type = A;
};
template <typename A, typename C>
struct conditional<false, A, C> {
  using type = C;
};
template <bool B, typename A, typename C>
using conditional_t = typename conditional<B, A, C>::type;

template <bool B, typename T = void>
struct enable_if {};
template <typename T>
struct enable_if<true, T> {
  using type = T;
};
template <bool B, typename T = void>
using enable_if_t = typename enable_if<B, T>::type;

template <typename...>
using void_t = void;

template <typename T> struct remove_reference { using type = T; };
template <typename T> struct remove_reference<T&> { using type = T; };
template <typename T> struct remove_reference<T&&> { using type = T; };
template <typename T> struct remove_cv { using type = T; };
template <typename T> struct remove_cv<const T> { using type = T; };
template <typename T> struct remove_cv<volatile T> { using type = T; };
template <typename T> struct remove_cv<const volatile T> { using type = T; };
template <typename T>
using decay_t = typename remove_cv<typename remove_reference<T>::type>::type;

template <typename T>
struct numeric_limits;
template <>
struct numeric_limits<float> {
  __device__ static constexpr float max() { return 3.402823466e+38f; }
  __device__ static constexpr float lowest() { return -3.402823466e+38f; }
  __device__ static float infinity() { return __int_as_float(0x7f800000); }
  __device__ static float quiet_NaN() { return __int_as_float(0x7fffffff); }
};
template <>
struct numeric_limits<double> {
  __device__ static constexpr double max() { return 1.7976931348623157e+308; }
  __device__ static constexpr double lowest() { return -1.7976931348623157e+308; }
  __device__ static double infinity() { return __longlong_as_double(0x7ff0000000000000ll); }
  __device__ static double quiet_NaN() { return __longlong_as_double(0x7ff8000000000000ll); }
};
template <>
struct numeric_limits<int32_t> {
  __device__ static constexpr int32_t max() { return 2147483647; }
  __device__ static constexpr int32_t lowest() { return -2147483647 - 1; }
};
template <>
struct numeric_limits<int64_t> {
  __device__ static constexpr int64_t max() { return 9223372036854775807ll; }
  __device__ static constexpr int64_t lowest() { return -9223372036854775807ll - 1; }
};
}  // namespace std

#endif  // NGRA_OPS_CUDA_RTC_STD_H_
