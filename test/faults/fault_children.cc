// The ranks of the fault tests. Each initializes the default group through
// the public API, the way a training script does, runs one operation in a
// loop (checking every result), announces "looping" once it is under way so
// that the parent injects its fault mid-stream, and on the first error
// prints when it caught it (error_ns, CLOCK_MONOTONIC) with the error's
// type and message, then exits 3.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/ddp.h"
#include "collie/nn/loss.h"
#include "collie/nn/sequential.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"

using namespace collie;
using namespace std::chrono_literals;

namespace {

const char* type_name(const std::exception& e) {
  if (dynamic_cast<const NetworkError*>(&e)) return "NetworkError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const StoreError*>(&e)) return "StoreError";
  if (dynamic_cast<const BackendError*>(&e)) return "BackendError";
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "std::exception";
}

}  // namespace

namespace collie::test {

// One line a parent can parse: when, what type, the message (newlines
// flattened so that the line stays one line).
void print_caught(const std::exception& e) {
  std::string msg = e.what();
  for (char& c : msg)
    if (c == '\n') c = ' ';
  std::printf("error_ns=%lld type=%s msg=%s\n", static_cast<long long>(monotonic_ns()),
              type_name(e), msg.c_str());
  std::fflush(stdout);
}

}  // namespace collie::test

namespace {

// rank r's element i of iteration k: small integers, sums exact in float.
float value(int rank, int64_t k, size_t i) { return static_cast<float>((rank + 1) + (i + k) % 7); }

}  // namespace

namespace collie::test {

void checked_all_reduce(int64_t k, size_t n, Timeout timeout) {
  const int rank = get_rank(), world = get_world_size();
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, k, i);
  get_default_group()->all_reduce(view(v.data(), n), {.timeout = timeout})->wait();
  for (size_t i = 0; i < n; i += 97) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += value(r, k, i);
    COLLIE_CHECK(v[i] == want, "all_reduce #", k, " of ", n, " element ", i, " is ", v[i],
                 ", expected ", want, " (rank ", rank, " of ", world, ")");
  }
}

}  // namespace collie::test

namespace {

void broadcast_once(int64_t k, Timeout timeout) {
  const int rank = get_rank();
  const size_t n = 1 << 18;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, k, i);
  get_default_group()->broadcast(view(v.data(), n), {.root = 0, .timeout = timeout})->wait();
  for (size_t i = 0; i < n; i += 97)
    COLLIE_CHECK(v[i] == value(0, k, i), "broadcast #", k, " element ", i, " is ", v[i]);
}

}  // namespace

// args: how ("file:<path>" | "env"), op (all_reduce | broadcast | barrier |
// ddp), rank, world (ignored for env), pid dir ("-" for none), per-call
// timeout in ms (0: the group's), group timeout in s.
COLLIE_TEST_CHILD(loop_rank) {
  const std::string how = args.at(0), op = args.at(1);
  InitOptions options{.backend = "cpu"};
  options.timeout = std::chrono::seconds(std::stoi(args.at(6)));
  if (how != "env") {
    options.rank = std::stoi(args.at(2));
    options.world_size = std::stoi(args.at(3));
    options.init_method = "file://" + how.substr(5);
  }
  init_process_group(options);
  const int rank = get_rank();
  if (args.at(4) != "-") test::write_pid_file(args.at(4), rank);
  const Timeout call_timeout =
      std::stoi(args.at(5)) > 0 ? Timeout(std::stoi(args.at(5))) : kUnsetTimeout;

  nn::Sequential model =
      nn::make_mlp<float>({.sizes = {256, 512, 512, 10}, .seed = 7, .flatten = false});
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (op == "ddp") ddp = std::make_unique<nn::DistributedDataParallel>(model, *get_default_group());
  nn::Tensor x({32, 256}), grad;
  for (size_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>((i * 37 + rank) % 11) / 11.0f;
  std::vector<int64_t> labels(32);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);

  try {
    for (int64_t k = 0;; ++k) {
      if (op == "all_reduce") {
        test::checked_all_reduce(k, 1 << 18, call_timeout);
      } else if (op == "broadcast") {
        broadcast_once(k, call_timeout);
      } else if (op == "barrier") {
        get_default_group()->barrier({.timeout = call_timeout})->wait();
      } else if (op == "ddp") {
        nn::cross_entropy(ddp->forward(x), labels, &grad);
        ddp->backward(grad);
      } else {
        throw InvalidArgument("unknown op " + op);
      }
      if (k == 3) {
        std::printf("looping rank %d\n", rank);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    test::print_caught(e);
    // A second call must be refused at once, not hang on a broken group.
    auto start = Clock::now();
    try {
      get_default_group()->barrier({.timeout = 30s})->wait();
      std::printf("later barrier succeeded\n");
    } catch (const std::exception& later) {
      std::printf(
          "later_ms=%lld\n",
          static_cast<long long>(
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
    }
    std::fflush(stdout);
    std::_Exit(3);  // a broken group may not shut down cleanly; that is not under test here
  }
}
