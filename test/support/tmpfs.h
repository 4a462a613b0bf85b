// Tmpfs: a small tmpfs mounted on a fresh directory, for tests of a full or
// read-only disk; unmounted and removed on destruction. Mounting needs root:
// where the mount cannot be made, the constructor removes what it made and
// skips the test with the reason (skip_test: a failure under CI=true, where
// the test command runs as root). Construct it before the test starts
// processes (a skip exits without unwinding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/test/support/temp_dir.h"

namespace collie::test {

class Tmpfs {
 public:
  // `flags` are mount(2)'s, e.g. MS_RDONLY.
  explicit Tmpfs(size_t bytes, unsigned long flags = 0);
  ~Tmpfs();
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;

  const std::string& path() const { return path_; }
  // The bytes an unprivileged writer can still write; throws
  // std::system_error.
  uint64_t free_bytes() const;

 private:
  TempDir dir_;
  std::string path_;
};

}  // namespace collie::test
