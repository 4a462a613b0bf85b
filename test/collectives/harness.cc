#include "collie/test/collectives/harness.h"

#include <atomic>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/hash_store.h"

namespace collie::test {

std::vector<std::string> run_ranks(int size, const CommunicatorOptions& options,
                                   const std::function<void(Communicator&)>& fn) {
  return run_ranks(
      size, [&](int) { return options; }, fn);
}

std::vector<std::string> run_ranks(int size,
                                   const std::function<CommunicatorOptions(int)>& options_of,
                                   const std::function<void(Communicator&)>& fn) {
  static std::atomic<int> next_group{0};
  HashStore store(std::chrono::seconds(60));
  const int group = next_group++;
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    CommunicatorOptions opts = options_of(r);
    opts.store_prefix = str_cat(opts.store_prefix, "_t", group);
    threads.emplace_back([&, r, opts] {
      try {
        auto comm = Communicator::connect(store, r, size, CommunicatorOptions::from_env(opts));
        fn(*comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty error message)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::string join_errors(const std::vector<std::string>& errors) {
  std::string out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) out += str_cat("rank ", r, ": ", errors[r], "\n");
  }
  return out;
}

}  // namespace collie::test
