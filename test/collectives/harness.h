// Helpers for the collectives tests: ranks as threads of this process over
// one HashStore, deterministic per-rank data of any dtype, and references
// computed locally with the arithmetic the collectives promise (the element
// type's own; float32 then one rounding for float16/bfloat16).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "rendezvous/store.h"
#include "runtime/base/types.h"

namespace collie::test {

// Runs fn(comm) on `size` threads, one Communicator each (a fresh store
// prefix per call). Returns one entry per rank: "" or the error it threw.
std::vector<std::string> run_ranks(int size, const CommunicatorOptions& options,
                                   const std::function<void(Communicator&)>& fn);
// "" when every entry is empty, else "rank r: error" lines.
std::string join_errors(const std::vector<std::string>& errors);

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

inline TensorView view_of(std::vector<uint8_t>& bytes, DataType dtype, size_t offset_elems = 0,
                          size_t count = SIZE_MAX) {
  const size_t es = element_size(dtype);
  const size_t total = bytes.size() / es;
  return TensorView{bytes.data() + offset_elems * es,
                    count == SIZE_MAX ? total - offset_elems : count, dtype, Device::cpu()};
}

}  // namespace collie::test
