// Helpers for the collectives tests: ranks as threads of this process over
// one HashStore; the data and references are test/support/reference.h's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collie/base/str_cat.h"
#include "collie/base/types.h"
#include "collie/collectives/communicator.h"
#include "collie/rendezvous/store.h"
#include "collie/test/support/reference.h"

namespace collie::test {

// Runs fn(comm) on `size` threads, one Communicator each (a fresh store
// prefix per call). Returns one entry per rank: "" or the error it threw.
std::vector<std::string> run_ranks(int size, const CommunicatorOptions& options,
                                   const std::function<void(Communicator&)>& fn);
// The same with rank r's options options_of(r) (their store prefixes must
// be equal: the group's).
std::vector<std::string> run_ranks(int size,
                                   const std::function<CommunicatorOptions(int)>& options_of,
                                   const std::function<void(Communicator&)>& fn);
// "" when every entry is empty, else "rank r: error" lines.
std::string join_errors(const std::vector<std::string>& errors);

// Sets an environment variable for the scope of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

// The counts a sweep over P ranks tries (0, 1, P-1, P+1 and a large odd
// one); the dtypes and ops are reference.h's kAllDtypes and kAllOps.
inline std::vector<size_t> counts_for(int P) {
  return {0, 1, static_cast<size_t>(std::max(P - 1, 0)), static_cast<size_t>(P + 1), 3001};
}

// Calls case_fn(dt, op, n, in_place) for every dtype and op (AVG only on
// floating-point types), every count for world size P, out of place and in
// place.
template <typename CaseFn>
void for_each_reduction(int P, CaseFn&& case_fn) {
  for (DataType dt : kAllDtypes)
    for (ReduceOp op : kAllOps) {
      if (!unsupported_reduction(op, dt).empty()) continue;
      for (size_t n : counts_for(P))
        for (bool in_place : {false, true}) case_fn(dt, op, n, in_place);
    }
}

// Throws naming the case when got != want.
#define EXPECT_SAME(got, want, dtype, ...)                                           \
  do {                                                                               \
    const std::string diff_ = ::collie::test::compare(got, want, dtype);             \
    if (!diff_.empty()) throw std::runtime_error(str_cat(__VA_ARGS__, ": ", diff_)); \
  } while (0)

inline TensorView view_of(std::vector<uint8_t>& bytes, DataType dtype, size_t offset_elems = 0,
                          size_t count = SIZE_MAX) {
  const size_t es = element_size(dtype);
  const size_t total = bytes.size() / es;
  return TensorView{bytes.data() + offset_elems * es,
                    count == SIZE_MAX ? total - offset_elems : count, dtype, Device::cpu()};
}

}  // namespace collie::test
