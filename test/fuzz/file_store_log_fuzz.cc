// libFuzzer target for FileStore's on-disk records (rendezvous/
// file_store_log.h). The log reads its file with pread and has no parsing
// function apart from the file, so the driver fuzzes through a real file in
// a private temporary folder (in /dev/shm when there is one, for speed).
//
// Input layout: byte 0 picks the field cap (bit 0: 64 bytes, else 1 MiB);
// byte 1 picks where the file is cut for the second reader; the rest is the
// file. Two readers replay it:
//   A reads the whole file with one refresh();
//   B reads the first part, then the rest after it was appended, as a reader
//     does when it refreshes while a writer's records keep arriving.
// Promises checked:
//   - a rejected file is a StoreError naming the path and an offset;
//   - A and B agree: both fail, or both end with the same entries (a reader
//     that met a cut-off record resumes at that record, and nothing is lost
//     or applied twice);
//   - every key and value accepted respects the cap.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "collie/base/deadline.h"
#include "collie/base/error.h"
#include "collie/rendezvous/file_store_log.h"
#include "collie/test/fuzz/fuzz_check.h"

namespace {

constexpr const char* kTarget = "file_store_log_fuzz";

// One folder per process, removed at exit.
struct Scratch {
  std::string dir;
  Scratch() {
    const char* base = ::access("/dev/shm", W_OK) == 0
                           ? "/dev/shm"
                           : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    std::string tmpl = std::string(base) + "/collie-fslog-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) collie::fuzz::broken(kTarget, "mkdtemp failed");
    dir = tmpl;
  }
  ~Scratch() {
    ::unlink((dir + "/a").c_str());
    ::unlink((dir + "/b").c_str());
    ::rmdir(dir.c_str());
  }
};

void write_file(const std::string& path, const uint8_t* data, size_t size, bool append) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0600);
  if (fd < 0) collie::fuzz::broken(kTarget, "cannot open " + path);
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) collie::fuzz::broken(kTarget, "cannot write " + path);
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

// refresh() under the lock; false (after checking the message) on a StoreError.
bool refresh(collie::FileStoreLog& log) {
  try {
    collie::FileStoreLog::Lock lock(log, collie::Deadline(std::chrono::seconds(10)));
    log.refresh();
    return true;
  } catch (const collie::StoreError& e) {
    const std::string what = e.what();
    collie::fuzz::check(what.find(log.path()) != std::string::npos, kTarget,
                        "an error that does not name the file: " + what);
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using collie::fuzz::check;
  static Scratch scratch;
  if (size < 2) return 0;
  const size_t cap = (data[0] & 1) ? 64 : size_t{1} << 20;
  const uint8_t* file = data + 2;
  const size_t file_size = size - 2;
  const size_t cut = file_size * data[1] / 255;

  const std::string path_a = scratch.dir + "/a";
  write_file(path_a, file, file_size, false);
  collie::FileStoreLog a(path_a, cap);
  const bool a_ok = refresh(a);

  const std::string path_b = scratch.dir + "/b";
  write_file(path_b, file, cut, false);
  collie::FileStoreLog b(path_b, cap);
  refresh(b);  // may stop at a record the cut split
  write_file(path_b, file + cut, file_size - cut, true);
  const bool b_ok = refresh(b);

  check(a_ok == b_ok, kTarget, "reading in two steps changed whether the file is valid");
  if (!a_ok) return 0;
  check(a.entries() == b.entries(), kTarget, "reading in two steps changed the entries");
  for (const auto& [key, value] : a.entries()) {
    check(key.size() <= cap && value.size() <= cap, kTarget, "a field over the cap was accepted");
    check(!key.starts_with(collie::FileStoreLog::kTombstonePrefix), kTarget,
          "a tombstone record became an entry");
  }
  return 0;
}
