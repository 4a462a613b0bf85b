// A mismatched call must fail without writing a byte of the other call's
// data into the user's buffer ("never mixed data"). The receiver
// reads each message's header on its own and compares it with its call
// before it lets the payload into the destination; these cases pair calls
// whose messages would otherwise land there: a receiver posted straight on
// the user's tensor (broadcast's direct and chained paths, all_gather's
// slots) against a peer sending another call's payload of the same or a
// different size. Ranks are threads over a HashStore; each rank's buffer is
// filled with a value the peer never sends, and must still hold only that
// value after the failure.
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/test/collectives/harness.h"

using namespace collie;
using namespace collie::test;
using namespace std::chrono_literals;

namespace {

struct Pair {
  const char* name;
  // One call per rank on `buf` (rank r's buffer, filled with sentinel(r)).
  std::function<void(Communicator&, std::vector<float>&)> call[2];
  size_t elements[2];
};

float sentinel(int rank) { return 10.0f + static_cast<float>(rank); }

TensorView fview(std::vector<float>& v, size_t offset = 0, size_t count = SIZE_MAX) {
  return TensorView{v.data() + offset, count == SIZE_MAX ? v.size() - offset : count,
                    DataType::kFloat32, Device::cpu()};
}

void all_reduce_in_place(Communicator& c, std::vector<float>& v, AllReduceAlgorithm algorithm) {
  c.all_reduce(fview(v), fview(v), ReduceOp::kSum, Deadline(30s), algorithm);
}

// In place: this rank's slot of v is the input.
void all_gather_in_place(Communicator& c, std::vector<float>& v) {
  const size_t n = v.size() / 2;
  c.all_gather(fview(v, c.rank() * n, n), fview(v), Deadline(30s));
}

}  // namespace

TEST_CASE("a mismatched call leaves every rank's buffer untouched", "[mismatch]") {
  constexpr size_t kSmall = 1000;     // below small_message_bytes: direct sends
  constexpr size_t kLarge = 1 << 20;  // 4 MiB: ring / pipelined chain
  constexpr size_t kExpress = 64;     // 256 bytes: the express exchange
  auto bcast0 = [](Communicator& c, std::vector<float>& v) {
    c.broadcast(fview(v), 0, Deadline(30s));
  };
  auto small_ar = [](Communicator& c, std::vector<float>& v) {
    all_reduce_in_place(c, v, AllReduceAlgorithm::kSmall);
  };
  auto ring_ar = [](Communicator& c, std::vector<float>& v) {
    all_reduce_in_place(c, v, AllReduceAlgorithm::kRing);
  };
  auto gather = [](Communicator& c, std::vector<float>& v) { all_gather_in_place(c, v); };
  const std::vector<Pair> pairs = {
      // The reported case: rank 1's broadcast receive is posted on the
      // user's tensor and rank 0's all_reduce payload has the same size.
      {"small all_reduce vs broadcast", {small_ar, bcast0}, {kSmall, kSmall}},
      {"ring all_reduce vs pipelined broadcast", {ring_ar, bcast0}, {kLarge, kLarge}},
      {"broadcast count 1000 vs 1001", {bcast0, bcast0}, {kSmall, kSmall + 1}},
      {"large broadcast count mismatch", {bcast0, bcast0}, {kLarge, kLarge + 64}},
      {"all_gather vs broadcast", {gather, bcast0}, {2 * kSmall, kSmall}},
      {"all_gather count mismatch", {gather, gather}, {2 * kSmall, 2 * kSmall + 2}},
      {"small all_reduce vs all_gather", {small_ar, gather}, {kSmall, 2 * kSmall}},
      // At most Transport::kExpressBytes: two ranks exchange straight
      // through the shared-memory ring (Transport::exchange), whose look at
      // the peer's frame must refuse another call's frame the same way.
      {"express all_reduce vs broadcast", {small_ar, bcast0}, {kExpress, kExpress}},
      {"express all_reduce count 64 vs 65", {small_ar, small_ar}, {kExpress, kExpress + 1}},
  };
  for (const Pair& pair : pairs) {
    CommunicatorOptions options;
    options.store_prefix = str_cat("mismatch_buffer/", pair.name);
    options.timeout = 30s;
    std::vector<std::vector<float>> buffers(2);
    std::vector<std::string> failures(2);
    const auto errors = run_ranks(2, options, [&](Communicator& c) {
      const int r = c.rank();
      auto& buf = buffers[r];
      buf.assign(pair.elements[r], sentinel(r));
      try {
        pair.call[r](c, buf);
        // A rank whose part only sent can finish first; its next call
        // must then fail instead.
        c.barrier(Deadline(30s));
      } catch (const Error& e) {
        failures[r] = e.what();
      }
    });
    INFO(pair.name << "\n"
                   << join_errors(errors) << "rank 0: " << failures[0]
                   << "\nrank 1: " << failures[1]);
    CHECK(join_errors(errors).empty());
    for (int r = 0; r < 2; ++r) {
      CHECK_FALSE(failures[r].empty());
      size_t changed = 0, first = SIZE_MAX;
      for (size_t i = 0; i < buffers[r].size(); ++i) {
        if (buffers[r][i] != sentinel(r)) {
          ++changed;
          first = std::min(first, i);
        }
      }
      INFO("rank " << r << ": " << changed << " element(s) changed, the first at " << first);
      CHECK(changed == 0);
    }
  }
}
