// samples/rendezvous_demo, the store-only job: its ranks meet through a
// TcpStore and exit 0, and a failing worker fails the job at once, the others
// stopped rather than left to their deadline.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"

namespace collie {
namespace {

TEST_CASE("rendezvous_demo: the interim main job meets and exits 0", "[samples][rendezvous_demo]") {
  const std::string demo = std::string(COLLIE_BIN_DIR) + "/rendezvous_demo";
  if (::access(demo.c_str(), X_OK) != 0)
    test::skip_test(demo + " not built (COLLIE_BUILD_SAMPLES=OFF?)");
  auto p = test::Subprocess::spawn({demo, "--nproc", "5", "--timeout", "60"});
  auto status = p.wait(std::chrono::seconds(90));
  INFO(p.out() << p.err());
  CHECK(status.ok());
  CHECK_THAT(p.out(), Catch::Contains("all 5 ranks met"));
  CHECK_THAT(p.out(), Catch::Contains("all 5 workers exited cleanly"));
}

TEST_CASE("rendezvous_demo: a failing worker fails the job and stops the others",
          "[samples][rendezvous_demo]") {
  const std::string demo = std::string(COLLIE_BIN_DIR) + "/rendezvous_demo";
  if (::access(demo.c_str(), X_OK) != 0)
    test::skip_test(demo + " not built (COLLIE_BUILD_SAMPLES=OFF?)");
  test::SpawnOptions options;
  options.env["COLLIE_DEMO_FAIL_RANK"] = "2";
  auto p = test::Subprocess::spawn({demo, "--nproc", "4", "--timeout", "60"}, options);
  // The others are stuck at the barrier: the parent must kill them at once,
  // not wait for the 60 s deadline.
  auto status = p.wait(std::chrono::seconds(30));
  INFO(p.out() << p.err());
  CHECK(status.exit_code == 1);
  CHECK_THAT(p.err(), Catch::Contains("FAILED: rank 2"));
  CHECK_THAT(p.err(), Catch::Contains("exited with 3"));
}

}  // namespace
}  // namespace collie
