// Deterministic per-rank data of any dtype and references computed locally
// with the arithmetic the collectives promise (the element type's own;
// float32 then one rounding for float16/bfloat16), shared by the
// collectives sweep and the ProcessGroup contract suite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collie/base/types.h"

namespace collie::test {

// Every dtype and every reduce op, for sweeps.
inline constexpr DataType kAllDtypes[] = {
    DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
    DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
    DataType::kUInt8,    DataType::kInt8,    DataType::kBool};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProduct,
                                       ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kBand,
                                       ReduceOp::kBor, ReduceOp::kBxor};

// Rank p's element i: a small integer (exact in every dtype, and sums and
// products of eight of them stay exact in float32).
double value_of(int rank, size_t i, ReduceOp op, DataType dtype);

// count elements of dtype, element i = value_of(rank, offset + i).
std::vector<uint8_t> make_data(DataType dtype, size_t count, int rank, ReduceOp op,
                               size_t offset = 0);

// Element i of the reduction over ranks 0..size-1 of value_of(p, offset + i).
std::vector<uint8_t> reference_reduce(DataType dtype, ReduceOp op, int size, size_t count,
                                      size_t offset = 0);

// "" when equal, else where and how they differ.
std::string compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                    DataType dtype);

}  // namespace collie::test
