// FileStore beyond the Store contract: several real processes sharing one
// file (an exact counter, a barrier, removal by the last user), corrupt and
// truncated files, the lock deadline, and a file shared with torch's own
// FileStore (Debian's python3-torch 1.13).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/file_store.h"
#include "collie/test/support/child.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;
using test::Subprocess;

namespace {

constexpr Timeout kChildLimit = std::chrono::seconds(60);

bool exists(const std::string& path) { return std::filesystem::exists(path); }

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// One record as torch lays it out: uint32 LE length + bytes, twice.
std::string record(const std::string& key, const std::string& value) {
  auto field = [](const std::string& s) {
    uint32_t n = static_cast<uint32_t>(s.size());
    std::string out(reinterpret_cast<const char*>(&n), 4);
    return out + s;
  };
  return field(key) + field(value);
}

std::vector<Subprocess> spawn_all(int n, const std::string& child,
                                  const std::vector<std::string>& args) {
  std::vector<Subprocess> procs;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> a = {std::to_string(i)};
    a.insert(a.end(), args.begin(), args.end());
    procs.push_back(Subprocess::spawn(test::child_argv(child, a)));
  }
  return procs;
}

void require_all_ok(std::vector<Subprocess>& procs) {
  for (auto& p : procs) {
    auto status = p.wait(kChildLimit);
    INFO("child " << p.command_line() << "\nstderr:\n" << p.err());
    REQUIRE(status.ok());
  }
}

}  // namespace

// args: index, path, world_size, adds
COLLIE_TEST_CHILD(file_store_adder) {
  FileStore store(args.at(1), std::stoi(args.at(2)));
  int adds = std::stoi(args.at(3));
  for (int i = 0; i < adds; ++i) store.add("counter", 1);
  return 0;
}

// args: index, path, world_size. Arrives, waits for everyone, then checks
// that everyone really had arrived: a wait that returned early fails here.
COLLIE_TEST_CHILD(file_store_barrier) {
  const int index = std::stoi(args.at(0));
  const int world = std::stoi(args.at(2));
  FileStore store(args.at(1), world);
  std::vector<std::string> keys;
  for (int i = 0; i < world; ++i) keys.push_back(str_cat("arrived/", i));
  store.set(keys[index], std::to_string(index));
  store.wait(keys, std::chrono::seconds(60));
  for (int i = 0; i < world; ++i)
    if (to_string(store.get(keys[i])) != std::to_string(i)) return 3;
  return store.check(keys) ? 0 : 4;
}

TEST_CASE("FileStore: processes adding to one counter reach the exact total",
          "[file_store][multiprocess]") {
  test::TempDir dir;
  const std::string path = dir.file("store");
  constexpr int kProcs = 4, kAdds = 100;
  // The parent is one more user, so the file outlives the children.
  FileStore parent(path, kProcs + 1);
  auto procs = spawn_all(kProcs, "file_store_adder",
                         {path, std::to_string(kProcs + 1), std::to_string(kAdds)});
  require_all_ok(procs);
  CHECK(parent.add("counter", 0) == kProcs * kAdds);
}

TEST_CASE("FileStore: a barrier through wait across processes, then the last user removes the file",
          "[file_store][multiprocess]") {
  test::TempDir dir;
  const std::string path = dir.file("barrier");
  constexpr int kProcs = 4;
  auto procs = spawn_all(kProcs, "file_store_barrier", {path, std::to_string(kProcs)});
  require_all_ok(procs);
  // All four closed: the last one's destructor removed the file.
  CHECK_FALSE(exists(path));
}

TEST_CASE("FileStore: the file stays until the last of world_size users closes it",
          "[file_store][multiprocess]") {
  test::TempDir dir;
  const std::string path = dir.file("lifetime");
  constexpr int kProcs = 3;
  {
    FileStore parent(path, kProcs + 1);
    auto procs = spawn_all(kProcs, "file_store_adder", {path, std::to_string(kProcs + 1), "1"});
    require_all_ok(procs);
    // Three of four finished; the parent still holds it.
    CHECK(exists(path));
    CHECK(parent.add("counter", 0) == kProcs);
    CHECK(parent.num_keys() == 1);  // the bookkeeping counters are not user keys
  }
  CHECK_FALSE(exists(path));
}

TEST_CASE("FileStore: lifetime within one process", "[file_store]") {
  test::TempDir dir;
  {
    FileStore a(dir.file("one"), 1);
    a.set("k", "v");
  }
  CHECK_FALSE(exists(dir.file("one")));
  {
    // Two handles, world size 2: the first close keeps the file.
    auto a = std::make_unique<FileStore>(dir.file("two"), 2);
    FileStore b(dir.file("two"), 2);
    a.reset();
    CHECK(exists(dir.file("two")));
    CHECK(b.check({}));
  }
  CHECK_FALSE(exists(dir.file("two")));
  {
    FileStore unknown(dir.file("unknown"), 0);
    unknown.set("k", "v");
  }
  // An unknown world size never removes the file (torch's numWorkers = -1).
  CHECK(exists(dir.file("unknown")));
  FileStore again(dir.file("unknown"), 0);
  CHECK(to_string(again.get("k")) == "v");
}

TEST_CASE("FileStore: corrupt files give a StoreError naming the path and offset", "[file_store]") {
  test::TempDir dir;
  const std::string good = record("/a", "1");
  auto open_error = [&](const std::string& name, const std::string& bytes,
                        FileStoreOptions options = {}) {
    write_file(dir.file(name), bytes);
    try {
      FileStore store(dir.file(name), 0, options);
      return std::string("no error");
    } catch (const StoreError& e) {
      return std::string(e.what());
    }
  };

  SECTION("a record cut off in its value") {
    std::string cut = good + record("/b", "hello").substr(0, 12);
    std::string msg = open_error("cut", cut);
    CHECK_THAT(msg, Contains(dir.file("cut")));
    CHECK_THAT(msg, Contains(str_cat("offset ", good.size())));
    CHECK_THAT(msg, Contains("past the end"));
  }
  SECTION("a length field cut off") {
    std::string msg = open_error("short", good + std::string("\x02\x00", 2));
    CHECK_THAT(msg, Contains(str_cat("offset ", good.size())));
    CHECK_THAT(msg, Contains("truncated key length"));
  }
  SECTION("a huge length in a small file allocates nothing") {
    std::string msg = open_error("huge",
                                 good + std::string("\xf0\xff\xff\xff"
                                                    "xx",
                                                    6),
                                 {.max_value_bytes = size_t{1} << 40});
    CHECK_THAT(msg, Contains("runs past the end of the file"));
  }
  SECTION("a length over the cap") {
    std::string msg =
        open_error("cap", good + record("/big", std::string(100, 'x')), {.max_value_bytes = 64});
    CHECK_THAT(msg, Contains("value length 100 exceeds the cap of 64"));
  }
  SECTION("a file that shrinks under an open store") {
    FileStore store(dir.file("shrink"), 0);
    store.set("key", "value");
    REQUIRE(::truncate(dir.file("shrink").c_str(), 4) == 0);
    CHECK_THROWS_WITH(store.check({"key"}), Contains("shrank"));
  }
  SECTION("garbage bytes") {
    std::string msg = open_error("garbage", "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_THAT(msg, Contains("offset 0"));
  }
}

TEST_CASE("FileStore: writing over the cap is refused and leaves the file intact", "[file_store]") {
  test::TempDir dir;
  FileStore store(dir.file("s"), 0, {.max_value_bytes = 16});
  store.set("ok", "small");
  CHECK_THROWS_AS(store.set("big", std::string(17, 'x')), InvalidArgument);
  CHECK_THROWS_AS(store.append("ok", as_span(std::string(12, 'x'))), InvalidArgument);
  FileStore other(dir.file("s"), 0, {.max_value_bytes = 16});
  CHECK(to_string(other.get("ok")) == "small");
  CHECK_FALSE(other.check({"big"}));
}

TEST_CASE("FileStore: a lock held elsewhere times out naming the file, and waits do not hold it",
          "[file_store]") {
  test::TempDir dir;
  const std::string path = dir.file("locked");
  FileStore store(path, 0, {.timeout = 300ms});
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX) == 0);
  try {
    store.set("k", "v");
    FAIL("set went through a lock someone else held");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains(path));
    CHECK_THAT(e.what(), Contains("lock"));
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);

  // A get parked on a missing key must leave the lock free for the writer,
  // whose own lock deadline is short.
  FileStore waiter(path, 0, {.timeout = 60s});
  FileStore writer(path, 0, {.timeout = 2s});
  Bytes got;
  std::thread t([&] {
    waiter.set("waiter_ready", "1");
    got = waiter.get("parked");
  });
  writer.wait({"waiter_ready"});
  writer.set("parked", "here");
  t.join();
  CHECK(to_string(got) == "here");
}

TEST_CASE("FileStore: torch's FileStore and collie's share one file", "[file_store][torch]") {
  test::require_or_skip(test::torch_missing().empty(), test::torch_missing());
  test::TempDir dir;
  const std::string path = dir.file("shared");
  FileStore store(path, 2);
  store.set("from_collie", Bytes{'c', 0, 'x'});
  store.add("counter", 10);
  // The torch process checks what collie wrote, then both add to one
  // counter at the same time: the total is exact only if torch's flock and
  // ours exclude each other.
  const std::string script =
      "import sys, datetime\n"
      "import torch.distributed as d\n"
      "s = d.FileStore(sys.argv[1], 2)\n"
      "s.set_timeout(datetime.timedelta(seconds=60))\n"
      "assert s.get('from_collie') == b'c\\x00x', s.get('from_collie')\n"
      "assert s.add('counter', 5) == 15\n"
      "s.set('from_torch', b'hello\\x00torch')\n"
      "s.wait(['collie_adding'])\n"
      "for _ in range(300): s.add('counter', 1)\n"
      "print('torch done', flush=True)\n";
  auto py = Subprocess::spawn({"/usr/bin/python3", "-c", script, path});
  store.set_timeout(std::chrono::seconds(1));
  while (!store.check({"from_torch"})) {
    if (!py.running()) {
      auto early = py.wait(kChildLimit);
      FAIL("the torch process exited early (" << early.describe() << "): " << py.err());
    }
    try {
      store.wait({"from_torch"});
    } catch (const TimeoutError&) {
    }
  }
  store.set_timeout(std::chrono::seconds(60));
  CHECK(store.get("from_torch") == to_bytes(std::string("hello\0torch", 11)));
  store.set("collie_adding", "1");
  for (int i = 0; i < 300; ++i) store.add("counter", 1);
  auto status = py.wait(kChildLimit);
  INFO(py.err());
  REQUIRE(status.ok());
  CHECK(store.add("counter", 0) == 15 + 600);
}

TEST_CASE("FileStore: threads sharing one object are serialised too", "[file_store]") {
  // flock does not exclude threads that share one open file description;
  // the store's mutex must.
  test::TempDir dir;
  FileStore store(dir.file("threads"), 0);
  constexpr int kThreads = 4, kAdds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
    });
  for (auto& t : threads) t.join();
  CHECK(store.add("counter", 0) == kThreads * kAdds);
  FileStore other(dir.file("threads"), 0);
  CHECK(to_string(other.get("counter")) == std::to_string(kThreads * kAdds));
}

TEST_CASE("FileStore: a path that cannot be opened names it", "[file_store]") {
  test::TempDir dir;
  const std::string path = dir.file("no/such/dir/store");
  CHECK_THROWS_AS(FileStore(path, 1), StoreError);
  CHECK_THROWS_WITH(FileStore(path, 1), Contains(path) && Contains("No such file"));
  CHECK_THROWS_AS(FileStore("", 1), InvalidArgument);
}
