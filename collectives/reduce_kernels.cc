#include "collie/collectives/reduce_kernels.h"

#include <cstdint>
#include <type_traits>

#include "collie/base/check.h"
#include "collie/base/half.h"

namespace collie {
namespace {

// The AVX2 clone is picked by an ifunc resolver that the dynamic loader runs
// before any constructor. Under ThreadSanitizer the resolver is instrumented
// and calls into a runtime that is not initialised yet: every test binary
// that links the collectives died at load time (SIGSEGV in the resolver). A
// TSan build races on data, not on vector width, so it takes the default.
#if defined(__SANITIZE_THREAD__)
#define COLLIE_CLONES
#else
#define COLLIE_CLONES __attribute__((target_clones("avx2", "default")))
#endif

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else {
      return a + b;
    }
  }
};
struct Product {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else {
      return a * b;
    }
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};
struct Band {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
struct Bor {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};
struct Bxor {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

template <typename Op, typename T>
[[gnu::always_inline]] inline void loop(T* dst, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(Op::apply(a[i], b[i]));
}

// bool: SUM and MAX are a logical or, PRODUCT and MIN a logical and (the
// arithmetic happens in int and converts back to bool), as torch defines them.
template <typename T>
[[gnu::always_inline]] inline void dispatch(T* dst, const T* a, const T* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return loop<Sum>(dst, a, b, n);
    case ReduceOp::kProduct: return loop<Product>(dst, a, b, n);
    case ReduceOp::kMin: return loop<Min>(dst, a, b, n);
    case ReduceOp::kMax: return loop<Max>(dst, a, b, n);
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      // Refused for floating-point types before anything is sent
      // (unsupported_reduction()); instantiated for integer types only.
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::kBand) return loop<Band>(dst, a, b, n);
        if (op == ReduceOp::kBor) return loop<Bor>(dst, a, b, n);
        return loop<Bxor>(dst, a, b, n);
      }
      break;
  }
  COLLIE_CHECK(false, "reduce op ", op, " on this element type");
}

// One cloned entry point per element type, overloaded on it: the template
// loops inline into it and get vectorised once per target.
COLLIE_CLONES void reduce_typed(float* d, const float* a, const float* b, size_t n, ReduceOp op) {
  dispatch(d, a, b, n, op);
}
COLLIE_CLONES void reduce_typed(double* d, const double* a, const double* b, size_t n,
                                ReduceOp op) {
  dispatch(d, a, b, n, op);
}
COLLIE_CLONES void reduce_typed(int32_t* d, const int32_t* a, const int32_t* b, size_t n,
                                ReduceOp op) {
  dispatch(d, a, b, n, op);
}
COLLIE_CLONES void reduce_typed(int64_t* d, const int64_t* a, const int64_t* b, size_t n,
                                ReduceOp op) {
  dispatch(d, a, b, n, op);
}
COLLIE_CLONES void reduce_typed(uint8_t* d, const uint8_t* a, const uint8_t* b, size_t n,
                                ReduceOp op) {
  dispatch(d, a, b, n, op);
}
COLLIE_CLONES void reduce_typed(int8_t* d, const int8_t* a, const int8_t* b, size_t n,
                                ReduceOp op) {
  dispatch(d, a, b, n, op);
}
COLLIE_CLONES void reduce_typed(bool* d, const bool* a, const bool* b, size_t n, ReduceOp op) {
  dispatch(d, a, b, n, op);
}

// Half types go through float; bfloat16's conversions are shifts and
// vectorise, float16's handle subnormals and mostly do not.
template <typename H>
[[gnu::always_inline]] inline float load(const H* p, size_t i) {
  return to_float(p[i]);
}
template <typename H>
[[gnu::always_inline]] inline H store(float f);
template <>
[[gnu::always_inline]] inline Half store<Half>(float f) {
  return to_half(f);
}
template <>
[[gnu::always_inline]] inline BFloat16 store<BFloat16>(float f) {
  return to_bfloat16(f);
}

template <typename Op, typename H>
void widen_loop(float* d, const H* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(load(a, i), b[i]);
}
template <typename Op, typename H>
void narrow_loop(H* d, const H* a, const float* b, size_t n, float divisor) {
  if (divisor == 1.0f) {
    for (size_t i = 0; i < n; ++i) d[i] = store<H>(Op::apply(load(a, i), b[i]));
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = store<H>(Op::apply(load(a, i), b[i]) / divisor);
  }
}

template <typename H>
void reduce_widen_t(float* d, const H* a, const float* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return widen_loop<Sum>(d, a, b, n);
    case ReduceOp::kProduct: return widen_loop<Product>(d, a, b, n);
    case ReduceOp::kMin: return widen_loop<Min>(d, a, b, n);
    case ReduceOp::kMax: return widen_loop<Max>(d, a, b, n);
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor: break;
  }
  COLLIE_CHECK(false, "reduce op ", op, " on a half type");
}

template <typename H>
void reduce_narrow_t(H* d, const H* a, const float* b, size_t n, ReduceOp op, float divisor) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return narrow_loop<Sum>(d, a, b, n, divisor);
    case ReduceOp::kProduct: return narrow_loop<Product>(d, a, b, n, divisor);
    case ReduceOp::kMin: return narrow_loop<Min>(d, a, b, n, divisor);
    case ReduceOp::kMax: return narrow_loop<Max>(d, a, b, n, divisor);
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor: break;
  }
  COLLIE_CHECK(false, "reduce op ", op, " on a half type");
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t n, DataType dtype, ReduceOp op) {
  visit_dtype(dtype, [&]<typename T>(TypeTag<T>) {
    if constexpr (is_half_type_v<T>) {
      COLLIE_CHECK(false, "reduce() on ", dtype,
                   ": half types go through reduce_widen/reduce_narrow");
    } else {
      reduce_typed(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), n, op);
    }
  });
}

void reduce_widen(float* dst, const void* a, const float* b, size_t n, DataType dtype,
                  ReduceOp op) {
  if (dtype == DataType::kFloat16)
    return reduce_widen_t(dst, static_cast<const Half*>(a), b, n, op);
  COLLIE_CHECK(dtype == DataType::kBFloat16, dtype);
  reduce_widen_t(dst, static_cast<const BFloat16*>(a), b, n, op);
}

void reduce_narrow(void* dst, const void* a, const float* b, size_t n, DataType dtype, ReduceOp op,
                   float divisor) {
  if (dtype == DataType::kFloat16) {
    return reduce_narrow_t(static_cast<Half*>(dst), static_cast<const Half*>(a), b, n, op, divisor);
  }
  COLLIE_CHECK(dtype == DataType::kBFloat16, dtype);
  reduce_narrow_t(static_cast<BFloat16*>(dst), static_cast<const BFloat16*>(a), b, n, op, divisor);
}

void widen(float* dst, const void* src, size_t n, DataType dtype) {
  if (dtype == DataType::kFloat16) {
    for (size_t i = 0; i < n; ++i) dst[i] = to_float(static_cast<const Half*>(src)[i]);
    return;
  }
  COLLIE_CHECK(dtype == DataType::kBFloat16, dtype);
  for (size_t i = 0; i < n; ++i) dst[i] = to_float(static_cast<const BFloat16*>(src)[i]);
}

void narrow(void* dst, const float* src, size_t n, DataType dtype, float divisor) {
  if (dtype == DataType::kFloat16) {
    for (size_t i = 0; i < n; ++i) static_cast<Half*>(dst)[i] = to_half(src[i] / divisor);
    return;
  }
  COLLIE_CHECK(dtype == DataType::kBFloat16, dtype);
  for (size_t i = 0; i < n; ++i) static_cast<BFloat16*>(dst)[i] = to_bfloat16(src[i] / divisor);
}

void divide(void* data, size_t n, DataType dtype, int divisor) {
  if (dtype == DataType::kFloat32) {
    auto* p = static_cast<float*>(data);
    const auto d = static_cast<float>(divisor);
    for (size_t i = 0; i < n; ++i) p[i] /= d;
  } else if (dtype == DataType::kFloat64) {
    auto* p = static_cast<double*>(data);
    const auto d = static_cast<double>(divisor);
    for (size_t i = 0; i < n; ++i) p[i] /= d;
  } else {
    COLLIE_CHECK(false, "divide() on ", dtype);
  }
}

}  // namespace collie
