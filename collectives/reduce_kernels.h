// Element-wise reduction loops. They are simple loops over restrict-free
// pointers (dst may alias a; the compiler versions the loop on that) compiled
// at -O3 and cloned for AVX2 (target_clones, picked at load time), so the
// same binary uses 256-bit vectors where the CPU has them and SSE2 where it
// does not.
//
// AVG is reduced as SUM; the caller divides once at the end. float16 and
// bfloat16 are reduced in float32 ("widen" accumulates into float32,
// "narrow" rounds to the storage type once), never rounded at every hop.
#pragma once

#include <cstddef>

#include "collie/base/types.h"

namespace collie {

// dst[i] = a[i] op b[i] for n elements of a type that is not float16/bfloat16.
void reduce(void* dst, const void* a, const void* b, size_t n, DataType dtype, ReduceOp op);

// Half types: dst[i] = float(a[i]) op b[i].
void reduce_widen(float* dst, const void* a, const float* b, size_t n, DataType dtype, ReduceOp op);
// Half types: dst[i] = round((float(a[i]) op b[i]) / divisor).
void reduce_narrow(void* dst, const void* a, const float* b, size_t n, DataType dtype, ReduceOp op,
                   float divisor);
// Half types: dst[i] = float(src[i]).
void widen(float* dst, const void* src, size_t n, DataType dtype);
// Half types: dst[i] = round(src[i] / divisor).
void narrow(void* dst, const float* src, size_t n, DataType dtype, float divisor);
// float32/float64: data[i] /= divisor (AVG's final step).
void divide(void* data, size_t n, DataType dtype, int divisor);

inline bool is_half(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

}  // namespace collie
