// Shared memory under a memory cgroup (Kubernetes, Slurm, systemd): a rank
// whose rings would not fit under the cgroup's limit falls back to the
// pair's socket with a WARN naming the sizes and the limit, instead of being
// SIGKILLed by the cgroup's OOM killer while it reserves the segment (a
// memfd's pages are charged to the cgroup, and past memory.max the kernel
// kills rather than fails). Two ranks run in a real child cgroup of 256 MiB
// (cgroup v2 where its memory controller can be had, else v1's), with
// COLLIE_SHM_BYTES=1GiB: both must finish their all_reduces. Needs root and
// a memory controller; skips (77) without them.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr uint64_t kLimit = uint64_t{256} << 20;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool write_file(const std::string& path, const std::string& text, std::string* why) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (out) return true;
  *why = str_cat("writing '", text, "' to ", path, " failed: ", std::strerror(errno));
  return false;
}

// The mount point of the first mount in /proc/self/mountinfo of `type`
// ("cgroup2", or "cgroup" with the memory controller), "" if none.
std::string mount_point(const std::string& type) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, source, super;
    head >> id >> parent >> dev >> root >> point;
    tail >> fstype >> source >> super;
    if (fstype != type) continue;
    if (type == "cgroup" && ("," + super + ",").find(",memory,") == std::string::npos) continue;
    return point;
  }
  return "";
}

bool has_word(const std::string& list, const std::string& word) {
  std::istringstream in(list);
  std::string w;
  while (in >> w)
    if (w == word) return true;
  return false;
}

// A child memory cgroup of `limit` bytes (no swap), removed on destruction
// after its processes are gone.
class MemoryCgroup {
 public:
  static std::optional<MemoryCgroup> create(uint64_t limit, std::string* why) {
    if (::geteuid() != 0) {
      *why = "not root: cannot create a memory cgroup";
      return std::nullopt;
    }
    const std::string name = str_cat("collie-shm-test-", ::getpid());
    std::string v2_why;
    if (const std::string root = mount_point("cgroup2"); !root.empty()) {
      if (auto cg = create_v2(root, name, limit, &v2_why)) return cg;
    } else {
      v2_why = "no cgroup2 mount";
    }
    std::string v1_why;
    if (const std::string root = mount_point("cgroup"); !root.empty()) {
      if (auto cg = create_v1(root, name, limit, &v1_why)) return cg;
    } else {
      v1_why = "no cgroup v1 hierarchy with the memory controller";
    }
    *why = str_cat("cgroup v2: ", v2_why, "; cgroup v1: ", v1_why);
    return std::nullopt;
  }

  MemoryCgroup(MemoryCgroup&& o) noexcept : dir_(std::exchange(o.dir_, "")), v2_(o.v2_) {}
  MemoryCgroup& operator=(MemoryCgroup&&) = delete;
  ~MemoryCgroup() {
    if (dir_.empty()) return;
    // Its processes are reaped by now (Subprocess waits or kills); a
    // process still exiting makes rmdir EBUSY for a moment.
    for (int i = 0; i < 200; ++i) {
      if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) return;
      for (const std::string& pid : split(slurp(dir_ + "/cgroup.procs")))
        ::kill(std::stoi(pid), SIGKILL);
      std::this_thread::sleep_for(25ms);
    }
    std::fprintf(stderr, "could not remove the cgroup %s: %s\n", dir_.c_str(),
                 std::strerror(errno));
  }

  const std::string& dir() const { return dir_; }
  bool v2() const { return v2_; }

  // The OOM kills counted in the cgroup so far (-1: unknown).
  int64_t oom_kills() const {
    const std::string events = slurp(dir_ + (v2_ ? "/memory.events" : "/memory.oom_control"));
    if (auto n = find_int(replace_spaces(events), "oom_kill")) return *n;
    return -1;
  }

  // argv run as a member of this cgroup: a shell joins it, then execs argv,
  // so the program is charged to the cgroup from its first page.
  std::vector<std::string> wrap(const std::vector<std::string>& argv) const {
    std::vector<std::string> out{
        "/bin/sh", "-c", str_cat("echo $$ > '", dir_, "/cgroup.procs' && exec \"$@\""), "sh"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

 private:
  MemoryCgroup(std::string dir, bool v2) : dir_(std::move(dir)), v2_(v2) {}

  static std::vector<std::string> split(const std::string& text) {
    std::istringstream in(text);
    std::vector<std::string> out;
    std::string w;
    while (in >> w) out.push_back(w);
    return out;
  }
  static std::string replace_spaces(std::string s) {
    // "oom_kill 3" -> "oom_kill=3", for find_int.
    for (char& c : s)
      if (c == ' ') c = '=';
    return s;
  }

  static std::optional<MemoryCgroup> create_v2(const std::string& root, const std::string& name,
                                               uint64_t limit, std::string* why) {
    if (!has_word(slurp(root + "/cgroup.controllers"), "memory")) {
      *why = str_cat("the memory controller is not available in ", root,
                     "/cgroup.controllers (bound to a v1 hierarchy?)");
      return std::nullopt;
    }
    if (!has_word(slurp(root + "/cgroup.subtree_control"), "memory") &&
        !write_file(root + "/cgroup.subtree_control", "+memory", why)) {
      return std::nullopt;
    }
    MemoryCgroup cg(root + "/" + name, true);
    if (::mkdir(cg.dir_.c_str(), 0755) != 0) {
      *why = str_cat("mkdir ", cg.dir_, ": ", std::strerror(errno));
      cg.dir_.clear();
      return std::nullopt;
    }
    if (!write_file(cg.dir_ + "/memory.max", std::to_string(limit), why)) return std::nullopt;
    std::string ignored;  // no swap file without swap accounting
    (void)write_file(cg.dir_ + "/memory.swap.max", "0", &ignored);
    return cg;
  }

  static std::optional<MemoryCgroup> create_v1(const std::string& root, const std::string& name,
                                               uint64_t limit, std::string* why) {
    MemoryCgroup cg(root + "/" + name, false);
    if (::mkdir(cg.dir_.c_str(), 0755) != 0) {
      *why = str_cat("mkdir ", cg.dir_, ": ", std::strerror(errno));
      cg.dir_.clear();
      return std::nullopt;
    }
    if (!write_file(cg.dir_ + "/memory.limit_in_bytes", std::to_string(limit), why))
      return std::nullopt;
    std::string ignored;  // without swap accounting there is no memsw file
    (void)write_file(cg.dir_ + "/memory.memsw.limit_in_bytes", std::to_string(limit), &ignored);
    return cg;
  }

  std::string dir_;
  bool v2_ = false;
};

struct RankRun {
  ExitStatus status[2];
  std::string out[2], err[2];
};

// Two cgroup_rank children in `cg`, rings of `shm_bytes`.
RankRun run_pair(const MemoryCgroup& cg, const std::string& shm_bytes) {
  TempDir dir;
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < 2; ++rank) {
    const auto argv = child_argv("cgroup_rank", {dir.file("rdzv"), std::to_string(rank), "2"});
    procs.push_back(
        Subprocess::spawn(cg.wrap(argv), {.env = clean_env({{"COLLIE_SHM_BYTES", shm_bytes},
                                                            {"COLLIE_TRANSPORT", "auto"},
                                                            {"COLLIE_HOST_ID", std::nullopt},
                                                            {"COLLIE_LOG_LEVEL", "WARN"}})}));
  }
  RankRun run;
  for (int rank = 0; rank < 2; ++rank) {
    run.status[rank] = procs[rank].wait(120s);
    run.out[rank] = procs[rank].out();
    run.err[rank] = procs[rank].err();
  }
  return run;
}

MemoryCgroup cgroup_or_skip() {
  std::string why;
  auto cg = MemoryCgroup::create(kLimit, &why);
  if (!cg) skip_test("no memory cgroup to run in: " + why);
  return std::move(*cg);
}

}  // namespace

// args: rendezvous file, rank, world. Prints its memory cgroup, runs eight
// checked all_reduces over the default group, prints "all_reduce ok".
COLLIE_TEST_CHILD(cgroup_rank) {
  const std::string cgroups = [] {
    std::ifstream in("/proc/self/cgroup");
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }();
  std::printf("cgroups: %s\n", cgroups.c_str());
  InitOptions options{.backend = "cpu"};
  options.timeout = std::chrono::seconds(60);
  options.rank = std::stoi(args.at(1));
  options.world_size = std::stoi(args.at(2));
  options.init_method = "file://" + args.at(0);
  init_process_group(options);
  for (int64_t k = 0; k < 8; ++k) checked_all_reduce(k, size_t{1} << 16, std::chrono::seconds(60));
  std::printf("all_reduce ok rank %d\n", get_rank());
  std::fflush(stdout);
  destroy_process_group();
  return 0;
}

TEST_CASE(
    "rings larger than the memory cgroup allows fall back to the socket instead of an OOM kill",
    "[faults][shm][cgroup]") {
  MemoryCgroup cg = cgroup_or_skip();
  const RankRun run = run_pair(cg, "1073741824");  // 1 GiB rings in 256 MiB
  for (int rank = 0; rank < 2; ++rank) {
    INFO("cgroup " << cg.dir() << (cg.v2() ? " (v2)" : " (v1)") << ", rank " << rank << ": "
                   << run.status[rank].describe() << "\n"
                   << run.out[rank] << run.err[rank]);
    CHECK(run.status[rank].signal == 0);  // SIGKILL here is the bug
    CHECK(run.status[rank].exit_code == 0);
    CHECK_THAT(run.out[rank], Contains("all_reduce ok"));
    CHECK_THAT(run.out[rank], Contains(cg.dir().substr(cg.dir().rfind('/'))));
    CHECK_THAT(run.err[rank], Contains("using the socket instead"));
  }
  // The rank that reserves (the connector, rank 1) names the sizes, the
  // limit and the knob; its peer says why it got no segment.
  CHECK_THAT(run.err[1], Contains("1 GiB") && Contains("256 MiB") && Contains(cg.dir()) &&
                             Contains("COLLIE_SHM_BYTES"));
  CHECK_THAT(run.err[0], Contains("reserved no shared-memory segment"));
  CHECK(cg.oom_kills() <= 0);
  const bool both_finished = run.status[0].exit_code == 0 && run.status[1].exit_code == 0 &&
                             run.status[0].signal == 0 && run.status[1].signal == 0;
  if (both_finished)
    record("1 GiB shm rings, 2 ranks in a 256 MiB memory cgroup",
           "both ranks fell back to the socket with a WARN naming the limit; no OOM kill");
}

TEST_CASE("rings that fit the memory cgroup still use shared memory", "[faults][shm][cgroup]") {
  MemoryCgroup cg = cgroup_or_skip();
  const RankRun run = run_pair(cg, "8388608");  // 8 MiB rings in 256 MiB
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank << ": " << run.status[rank].describe() << "\n"
                 << run.out[rank] << run.err[rank]);
    CHECK(run.status[rank].exit_code == 0);
    CHECK_THAT(run.out[rank], Contains("all_reduce ok"));
    CHECK_FALSE(run.err[rank].find("using the socket instead") != std::string::npos);
  }
}
