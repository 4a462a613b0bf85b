// Helpers for the collectives tests: ranks as threads of this process over
// one HashStore; the data and references are test/support/reference.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "rendezvous/store.h"
#include "runtime/base/types.h"
#include "test/support/reference.h"

namespace collie::test {

// Runs fn(comm) on `size` threads, one Communicator each (a fresh store
// prefix per call). Returns one entry per rank: "" or the error it threw.
std::vector<std::string> run_ranks(int size, const CommunicatorOptions& options,
                                   const std::function<void(Communicator&)>& fn);
// "" when every entry is empty, else "rank r: error" lines.
std::string join_errors(const std::vector<std::string>& errors);

inline TensorView view_of(std::vector<uint8_t>& bytes, DataType dtype, size_t offset_elems = 0,
                          size_t count = SIZE_MAX) {
  const size_t es = element_size(dtype);
  const size_t total = bytes.size() / es;
  return TensorView{bytes.data() + offset_elems * es,
                    count == SIZE_MAX ? total - offset_elems : count, dtype, Device::cpu()};
}

}  // namespace collie::test
