// Resource limits: a file-descriptor limit too low for the world size (set
// in each rank before init_process_group) and a full disk while saving a
// checkpoint (a 1 MiB tmpfs). Both must end in a clear error, promptly; the
// full disk must leave the previous checkpoint intact.
#include <sys/resource.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/state_dict.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"
#include "collie/test/support/tmpfs.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

// args: rdzv path, rank, world, spare descriptors above those open now.
COLLIE_TEST_CHILD(fd_limited_rank) {
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  const rlim_t limit = static_cast<rlim_t>(open_fds() + std::stoi(args.at(3)));
  rlimit rl{limit, limit};
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) throw Error("setrlimit failed");
  std::printf("nofile=%llu\n", static_cast<unsigned long long>(limit));
  try {
    init_process_group({.backend = "cpu",
                        .init_method = "file://" + args.at(0),
                        .world_size = world,
                        .rank = rank,
                        .timeout = std::chrono::seconds(10)});
    std::vector<float> v(1000, 1.0f);
    all_reduce(view(v.data(), v.size()));
    std::printf("all_reduce ok sum %g\n", static_cast<double>(v[0]));
  } catch (const std::exception& e) {
    print_caught(e);
  }
  std::fflush(stdout);
  std::_Exit(0);
}

TEST_CASE("a file-descriptor limit too low for the world size is a clear error on every rank",
          "[faults][limits]") {
  constexpr int kWorld = 6;
  TempDir dir;
  const auto start = Clock::now();
  auto procs = spawn_ranks(kWorld, "fd_limited_rank", [&](int rank) {
    return std::vector<std::string>{dir.file("rdzv"), std::to_string(rank), std::to_string(kWorld),
                                    "3"};
  });
  int clear = 0;
  for (int rank = 0; rank < kWorld; ++rank) {
    auto st = procs[rank].wait(std::chrono::seconds(60));
    std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    CHECK(st.ok());
    CHECK_THAT(out, Contains("error_ns="));  // nobody can complete with 3 spare descriptors
    CHECK_THAT(out, !Contains("all_reduce ok"));
    if (out.find("Too many open files") != std::string::npos) ++clear;
    // A rank whose socket() hits the limit says so (EMFILE and the limit),
    // never "Bad file descriptor" from using the -1 it got back.
    CHECK_THAT(out, !Contains("Bad file descriptor"));
    size_t t = out.find("type=");
    if (t != std::string::npos)
      record("RLIMIT_NOFILE = open + 3, world 6",
             str_cat("rank ", rank, ": ", out.substr(t, out.find('\n', t) - t)));
  }
  const auto secs = std::chrono::duration<double>(Clock::now() - start).count();
  // Ranks that hit EMFILE themselves say so; the others may only see their
  // peers vanish or stop accepting (a NetworkError naming them, at worst at
  // the 10 s deadline), which is also clear.
  CHECK(clear >= 1);
  CHECK(secs < 40);
  record("RLIMIT_NOFILE = open + 3, world 6",
         str_cat(clear, " of ", kWorld, " ranks named the descriptor limit; all failed within ",
                 static_cast<int>(secs), " s"));
}

TEST_CASE("a full disk while saving a checkpoint: a clear error, the previous checkpoint intact",
          "[faults][limits][tmpfs]") {
  Tmpfs disk(1 << 20);
  const std::string path = disk.path() + "/ckpt.bin";
  nn::StateDict small;
  small.set_int("step", 1);
  small.set_floats("w", {50000}, std::vector<float>(50000, 1.5f));  // 200 KiB
  nn::save_state_dict(small, path);
  nn::StateDict big;
  big.set_int("step", 2);
  big.set_floats("w", {400000}, std::vector<float>(400000, 2.5f));  // 1.6 MiB > the whole disk
  const auto start = Clock::now();
  std::string message;
  try {
    nn::save_state_dict(big, path);
  } catch (const Error& e) {
    message = e.what();
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  INFO(message);
  CHECK_THAT(message, Contains(path) && Contains("No space left on device"));
  nn::StateDict back = nn::load_state_dict(path);
  CHECK(back.get_int("step") == 1);
  CHECK(back.get_floats("w", {50000}) == std::vector<float>(50000, 1.5f));
  size_t files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(disk.path())) ++files;
  CHECK(files == 1);  // the failed save's temporary file is removed
  record("disk full (1 MiB tmpfs) while saving a checkpoint",
         str_cat("Error after ", ms, " ms: ", message, "; previous checkpoint loads; ", files,
                 " file(s) left in the directory"));
}
