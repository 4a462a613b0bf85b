// The plotting scripts (bench/compare/charts.py, matplotlib) redraw the
// pictures the docs show from the results files kept in docs/: each script
// writes its SVG under the name the docs use, the SVG parses as XML, and
// its text (the series' names) stays text.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

const std::string kPython = "/usr/bin/python3";
const std::string kSource = COLLIE_SOURCE_DIR;

void require_matplotlib() {
  test::require_or_skip(::access(kPython.c_str(), X_OK) == 0, "no " + kPython);
  auto p = test::Subprocess::spawn({kPython, "-c", "import matplotlib"});
  test::require_or_skip(p.wait(60s).ok(),
                        kPython + " has no matplotlib (Debian: python3-matplotlib)");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void run(const std::vector<std::string>& argv) {
  auto p = test::Subprocess::spawn(argv);
  const auto status = p.wait(120s);
  INFO(argv[1] << "\nstdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(status.ok());
}

// The file exists, is well-formed XML, and names `texts` as text.
void check_svg(const std::string& path, const std::vector<std::string>& texts) {
  INFO(path);
  auto p = test::Subprocess::spawn(
      {kPython, "-c", "import sys, xml.etree.ElementTree as e; e.parse(sys.argv[1])", path});
  REQUIRE(p.wait(60s).ok());
  const std::string svg = read_file(path);
  for (const auto& t : texts) CHECK_THAT(svg, Contains(t));
}

}  // namespace

TEST_CASE("the bench plots are drawn by matplotlib under the docs' names", "[bench][plot]") {
  require_matplotlib();
  test::TempDir dir;
  run({kPython, kSource + "/bench/compare/plot_results.py",
       kSource + "/docs/compare_collectives.json", "--out", dir.path(), "--prefix", "compare_"});
  check_svg(dir.file("compare_all_to_all_N2.svg"), {"collie", "Open MPI shm", "time per call"});
  check_svg(dir.file("compare_all_to_all_N4.svg"), {"collie", "torch 2.15 gloo"});
  check_svg(dir.file("compare_pingpong_N2.svg"), {"collie", "Open MPI shm han"});

  run({kPython, kSource + "/bench/multihost/multihost_report.py",
       kSource + "/docs/multihost_10gbit.json", kSource + "/docs/multihost_1gbit.json", "--summary",
       "--svg", dir.file("multihost.svg")});
  check_svg(dir.file("multihost.svg"), {"collie", "link rate", "Gloo HD"});

  run({kPython, kSource + "/bench/compare/torch_backends.py", "--load",
       kSource + "/docs/torch_backends.json", "--plot", dir.file("torch_backends.svg")});
  check_svg(dir.file("torch_backends.svg"), {"torch collie", "torch gloo", "DDP"});
}
