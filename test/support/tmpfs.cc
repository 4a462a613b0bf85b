#include "collie/test/support/tmpfs.h"

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "collie/test/support/skip.h"

namespace collie::test {

Tmpfs::Tmpfs(size_t bytes, unsigned long flags) : path_(dir_.file("tmpfs")) {
  const std::string options = "size=" + std::to_string(bytes);
  std::string why;
  if (::geteuid() != 0) {
    why = "mounting a tmpfs needs root";
  } else {
    std::filesystem::create_directory(path_);
    if (::mount("collie-test", path_.c_str(), "tmpfs", flags, options.c_str()) != 0)
      why = "cannot mount a tmpfs (" + options + ") on " + path_ + ": " + std::strerror(errno);
  }
  if (!why.empty()) {
    std::filesystem::remove_all(dir_.path());  // skip_test() exits without unwinding
    skip_test(why);
  }
}

Tmpfs::~Tmpfs() { ::umount2(path_.c_str(), MNT_DETACH); }

uint64_t Tmpfs::free_bytes() const {
  struct statvfs s {};
  if (::statvfs(path_.c_str(), &s) != 0)
    throw std::system_error(errno, std::generic_category(), "statvfs " + path_);
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

}  // namespace collie::test
