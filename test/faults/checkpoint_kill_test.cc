// The process saving checkpoints is SIGKILLed at random moments, 100 times:
// each time, the checkpoint on disk must load, be self-consistent, and be
// one of the saves the process made (the last it reported, or the one it
// was finishing when it died), never older than before. nn::save_state_dict
// writes a temporary file, fsyncs it and renames it over the checkpoint.
#include <signal.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "collie/base/check.h"
#include "collie/base/str_cat.h"
#include "collie/nn/atomic_file.h"
#include "collie/nn/state_dict.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;

namespace {

constexpr size_t kFloats = 64 * 1024;  // 256 KiB: a save takes long enough to be hit mid-write

nn::StateDict make_checkpoint(int64_t step) {
  nn::StateDict d;
  d.set_int("step", step);
  std::vector<float> w(kFloats);
  for (size_t i = 0; i < kFloats; ++i)
    w[i] = static_cast<float>((step * 31 + static_cast<int64_t>(i)) % 1009);
  d.set_floats("model.weight", {static_cast<int64_t>(kFloats)}, w);
  d.set_string("note", str_cat("checkpoint of step ", step));
  return d;
}

// Loads and checks that the weights are the ones of its step; returns it.
int64_t load_and_verify(const std::string& path) {
  nn::StateDict d = nn::load_state_dict(path);
  const int64_t step = d.get_int("step");
  COLLIE_CHECK(
      d.get_floats("model.weight", {static_cast<int64_t>(kFloats)}) ==
          make_checkpoint(step).get_floats("model.weight", {static_cast<int64_t>(kFloats)}),
      path, " holds step ", step, " with another step's weights");
  COLLIE_CHECK(d.get_string("note") == str_cat("checkpoint of step ", step));
  return step;
}

}  // namespace

// args: checkpoint path. Continues from the checkpoint on disk (if any),
// saving step after step and reporting each finished save.
COLLIE_TEST_CHILD(ckpt_saver) {
  const std::string path = args.at(0);
  int64_t step = std::filesystem::exists(path) ? load_and_verify(path) + 1 : 0;
  std::printf("saving\n");
  std::fflush(stdout);
  for (;; ++step) {
    nn::save_state_dict(make_checkpoint(step), path);
    std::printf("saved %lld\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
}

TEST_CASE("a saver SIGKILLed at 100 random moments always leaves a loadable, saved checkpoint",
          "[faults][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.bin");
  std::mt19937 rng(20261202);
  std::uniform_int_distribution<int> delay_us(0, 30000);
  int64_t previous = -1;
  int rounds_with_file = 0;
  const auto start = Clock::now();
  for (int round = 0; round < 100; ++round) {
    auto saver = Subprocess::spawn(child_argv("ckpt_saver", {path}));
    saver.wait_for_output("saving", std::chrono::seconds(30));
    // The random moment is the fault being injected, not synchronisation.
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    saver.kill(SIGKILL);
    auto st = saver.wait(std::chrono::seconds(30));
    INFO("round " << round << " " << st.describe() << "\n" << saver.err());
    REQUIRE(st.signal == SIGKILL);
    std::string out = saver.out();
    int64_t last_reported = -1;
    for (size_t at = out.rfind("saved "); at != std::string::npos;) {
      last_reported = std::stoll(out.substr(at + 6));
      break;
    }
    if (!std::filesystem::exists(path)) {
      // Killed before its first save ever finished: nothing was promised.
      REQUIRE(previous == -1);
      REQUIRE(last_reported == -1);
      continue;
    }
    ++rounds_with_file;
    int64_t step = -1;
    REQUIRE_NOTHROW(step = load_and_verify(path));
    // The last reported save, or the one whose rename landed just before
    // the kill; never an older one.
    if (last_reported >= 0) {
      CHECK((step == last_reported || step == last_reported + 1));
    } else {
      // No save finished this round: the previous one, or the one whose
      // rename landed just before the kill.
      CHECK((step == previous || step == previous + 1));
    }
    CHECK(step >= previous);
    previous = step;
  }
  auto count_leftovers = [&] {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator(dir.path()))
      if (e.path().filename() != "ckpt.bin") ++n;
    return n;
  };
  const size_t leftovers = count_leftovers();
  // One more save, by a live process: it removes every dead writer's file.
  nn::write_file_atomically(path, nn::read_file(path));
  CHECK(count_leftovers() == 0);
  REQUIRE_NOTHROW(load_and_verify(path));
  const auto secs = std::chrono::duration<double>(Clock::now() - start).count();
  // A save killed between creating its temporary file and the rename leaves
  // that file behind (the checkpoint itself is never affected) until the
  // next successful save, which removes dead writers' leftovers.
  record("checkpoint saver SIGKILLed 100 times",
         str_cat("checkpoint loadable and one of the saves every time (", rounds_with_file,
                 " rounds had a file, last step ", previous, "); ", leftovers,
                 " leftover temporary files; ", static_cast<int>(secs), " s"));
  CHECK(rounds_with_file > 50);
}
