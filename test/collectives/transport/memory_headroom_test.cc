// memory_headroom (collectives/transport/shm/memory_headroom.h) over fake
// /proc and cgroup trees: the tightest of every limit from the process's
// cgroup up to its hierarchy's root, cgroup v2 and v1, and MemAvailable; and
// the refusal a segment that would not fit gets. The real cgroup, with a
// real OOM killer, is test/faults/shm_cgroup_test.cc.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "collie/base/deadline.h"
#include "collie/collectives/transport/shm/memory_headroom.h"
#include "collie/collectives/transport/shm/shm_channel.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

void put(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

struct FakeProc {
  test::TempDir dir;
  MemorySources sources{dir.file("mountinfo"), dir.file("cgroup"), dir.file("meminfo")};
  std::string cg() const { return dir.file("cg"); }
  void mount_v2() {
    put(sources.mountinfo,
        "25 1 0:22 / /proc rw - proc proc rw\n"
        "30 25 0:26 / " +
            cg() + " rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  }
  void meminfo(uint64_t available_kib) {
    put(sources.meminfo, "MemTotal:       65536000 kB\nMemFree:        1000 kB\nMemAvailable:   " +
                             std::to_string(available_kib) + " kB\n");
  }
};

}  // namespace

TEST_CASE("memory_headroom takes the tightest cgroup v2 limit up the tree", "[shm][memory]") {
  FakeProc p;
  p.mount_v2();
  p.meminfo(64 * 1024 * 1024);  // 64 GiB
  put(p.sources.cgroup, "0::/job/step\n");
  // The job's limit (256 MiB, 40 MiB in use of which 8 MiB inactive page
  // cache) is tighter than the step's memory.high and the root has none.
  put(p.cg() + "/memory.current", "999999999\n");  // the root: no memory.max
  put(p.cg() + "/job/memory.max", "268435456\n");
  put(p.cg() + "/job/memory.high", "max\n");
  put(p.cg() + "/job/memory.current", std::to_string(40 * kMiB) + "\n");
  put(p.cg() + "/job/memory.stat",
      "anon 1\nfile 2\ninactive_file " + std::to_string(8 * kMiB) + "\nactive_file 3\n");
  put(p.cg() + "/job/step/memory.max", "max\n");
  put(p.cg() + "/job/step/memory.high", std::to_string(1024 * kMiB) + "\n");
  put(p.cg() + "/job/step/memory.current", std::to_string(30 * kMiB) + "\n");
  const MemoryHeadroom room = memory_headroom(p.sources);
  CHECK(room.bytes == (256 - 32) * kMiB);
  CHECK(room.cgroup_dir == p.cg() + "/job");
  CHECK_THAT(room.limit, Contains("memory.max 256 MiB") && Contains("32 MiB in use") &&
                             Contains(p.cg() + "/job"));

  SECTION("a tighter memory.high below it wins") {
    put(p.cg() + "/job/step/memory.high", std::to_string(100 * kMiB) + "\n");
    const MemoryHeadroom high = memory_headroom(p.sources);
    CHECK(high.bytes == 70 * kMiB);
    CHECK_THAT(high.limit, Contains("memory.high 100 MiB"));
    CHECK(high.cgroup_dir == p.cg() + "/job/step");
  }
  SECTION("MemAvailable wins when the machine has less") {
    p.meminfo(100 * 1024);  // 100 MiB
    const MemoryHeadroom machine = memory_headroom(p.sources);
    CHECK(machine.bytes == 100 * kMiB);
    CHECK_THAT(machine.limit, Contains("MemAvailable") && Contains("100 MiB"));
    // The lock is still the tightest cgroup's.
    CHECK(machine.cgroup_dir == p.cg() + "/job");
  }
  SECTION("a cgroup over its limit has no room") {
    put(p.cg() + "/job/memory.current", std::to_string(300 * kMiB) + "\n");
    put(p.cg() + "/job/memory.stat", "inactive_file 0\n");
    CHECK(memory_headroom(p.sources).bytes == 0);
  }
}

TEST_CASE("memory_headroom reads cgroup v1's memory.limit_in_bytes", "[shm][memory]") {
  FakeProc p;
  const std::string v1 = p.dir.file("v1mem");
  put(p.sources.mountinfo, "35 31 0:32 / " + v1 + " rw,relatime - cgroup cgroup rw,memory\n" +
                               "36 31 0:33 / " + p.dir.file("cpu") +
                               " rw,relatime - cgroup cgroup rw,cpu,cpuacct\n");
  put(p.sources.cgroup, "5:cpu,cpuacct:/elsewhere\n4:memory:/pod/ctr\n0::/\n");
  p.meminfo(64 * 1024 * 1024);
  put(v1 + "/memory.limit_in_bytes", "9223372036854771712\n");  // none
  put(v1 + "/memory.usage_in_bytes", "123456789\n");
  put(v1 + "/pod/memory.limit_in_bytes", std::to_string(512 * kMiB) + "\n");
  put(v1 + "/pod/memory.usage_in_bytes", std::to_string(112 * kMiB) + "\n");
  put(v1 + "/pod/memory.stat",
      "inactive_file 1\ntotal_inactive_file " + std::to_string(12 * kMiB) + "\n");
  put(v1 + "/pod/ctr/memory.limit_in_bytes", "9223372036854771712\n");
  put(v1 + "/pod/ctr/memory.usage_in_bytes", std::to_string(100 * kMiB) + "\n");
  // A cpu hierarchy's files never count.
  put(p.dir.file("cpu") + "/elsewhere/memory.limit_in_bytes", "4096\n");
  put(p.dir.file("cpu") + "/elsewhere/memory.usage_in_bytes", "0\n");
  const MemoryHeadroom room = memory_headroom(p.sources);
  CHECK(room.bytes == 412 * kMiB);
  CHECK(room.cgroup_dir == v1 + "/pod");
  CHECK_THAT(room.limit, Contains("memory.limit_in_bytes 512 MiB"));
}

TEST_CASE("memory_headroom in a container sees its own cgroup at the mount point",
          "[shm][memory]") {
  FakeProc p;
  // No cgroup namespace: /proc/self/cgroup names the host's path, and the
  // container's cgroup is what is mounted.
  put(p.sources.mountinfo,
      "30 25 0:26 /kubepods/pod1/ctr " + p.cg() + " ro,nosuid - cgroup2 cgroup2 rw\n");
  put(p.sources.cgroup, "0::/kubepods/pod1/ctr\n");
  put(p.cg() + "/memory.max", std::to_string(64 * kMiB) + "\n");
  put(p.cg() + "/memory.current", std::to_string(4 * kMiB) + "\n");
  CHECK(memory_headroom(p.sources).bytes == 60 * kMiB);

  SECTION("and a path outside the mounted root falls back to the mount point") {
    put(p.sources.cgroup, "0::/../../somewhere\n");
    CHECK(memory_headroom(p.sources).bytes == 60 * kMiB);
  }
}

TEST_CASE("memory_headroom without any limit is unlimited and refuses nothing", "[shm][memory]") {
  FakeProc p;  // none of its files exist
  const MemoryHeadroom room = memory_headroom(p.sources);
  CHECK(room.bytes == std::numeric_limits<uint64_t>::max());
  CHECK(room.limit.empty());
  CHECK(shm_memory_refusal(shm_segment_bytes(uint64_t{1} << 34), uint64_t{1} << 34, room).empty());
}

TEST_CASE("a segment may take three quarters of the headroom", "[shm][memory]") {
  MemoryHeadroom room;
  room.bytes = 246 * kMiB;
  room.limit = "the memory cgroup /sys/fs/cgroup/job (memory.max 256 MiB, 10 MiB in use)";
  const uint64_t ring = uint64_t{1} << 30;
  const std::string why = shm_memory_refusal(shm_segment_bytes(ring), ring, room);
  INFO(why);
  CHECK_THAT(why, Contains("1 GiB") && Contains("246 MiB") && Contains("memory.max 256 MiB") &&
                      Contains("COLLIE_SHM_BYTES") && Contains("3/4"));
  // The suggestion fits, and is the largest that does.
  const std::string key = "COLLIE_SHM_BYTES to at most ";
  const size_t at = why.find(key);
  REQUIRE(at != std::string::npos);
  const uint64_t fit = std::stoull(why.substr(at + key.size()));
  CHECK(fit % 64 == 0);
  CHECK(shm_memory_refusal(shm_segment_bytes(fit), fit, room).empty());
  CHECK_FALSE(shm_memory_refusal(shm_segment_bytes(fit + 64), fit + 64, room).empty());
  // The default 1 MiB rings fit easily.
  CHECK(shm_memory_refusal(shm_segment_bytes(kMiB), kMiB, room).empty());

  SECTION("no room even for the smallest rings") {
    room.bytes = 8192;
    const std::string none = shm_memory_refusal(shm_segment_bytes(4096), 4096, room);
    CHECK_THAT(none, Contains("raise the limit"));
  }
}

TEST_CASE("format_memory_bytes", "[shm][memory]") {
  CHECK(format_memory_bytes(4096) == "4096 bytes");
  CHECK(format_memory_bytes(256 * kMiB) == "256 MiB");
  CHECK(format_memory_bytes(uint64_t{3} << 29) == "1.5 GiB");
  CHECK(format_memory_bytes(kMiB + kMiB / 3) == "1.3 MiB");
}

TEST_CASE("the cgroup reservation lock excludes a second holder until released", "[shm][memory]") {
  test::TempDir dir;
  {
    const CgroupReservationLock first(dir.path(), Deadline(1s));
    REQUIRE(first.held());
    const CgroupReservationLock second(dir.path(), Deadline(50ms));
    CHECK_FALSE(second.held());
  }
  const CgroupReservationLock third(dir.path(), Deadline(1s));
  CHECK(third.held());
  CHECK_FALSE(CgroupReservationLock("", Deadline(1s)).held());
  CHECK_FALSE(CgroupReservationLock(dir.file("missing"), Deadline(1s)).held());
}
