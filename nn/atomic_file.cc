#include "collie/nn/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/base/unique_fd.h"

namespace collie::nn {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  const int err = errno;
  throw Error(str_cat(what, " '", path, "': ", std::strerror(err), " (errno ", err, ")"));
}

std::string directory_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A save killed between creating its temporary file and the rename (SIGKILL,
// power loss) leaves "<name>.tmp.<pid>.<n>" behind; nothing can remove it at
// that moment. The next successful save of the same file removes leftovers
// whose writer is gone, so they never pile up. A live writer's file (another
// process, or another thread of this one, saving the same path right now)
// is left alone.
void remove_dead_writers_leftovers(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    char* stop = nullptr;
    const long pid = std::strtol(rest.c_str(), &stop, 10);
    if (stop == rest.c_str() || *stop != '.' || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

}  // namespace

void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  // A unique name so that two writers of the same checkpoint never share a
  // temporary file; the pid tells whom a leftover belongs to.
  const std::string tmp = str_cat(path, ".tmp.", ::getpid(), ".", std::random_device{}());
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail("cannot create temporary file", tmp);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int saved = errno;
        ::unlink(tmp.c_str());
        errno = saved;
        fail(str_cat("cannot write ", bytes.size(), " bytes to"), tmp);
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd.get()) != 0) {
      const int saved = errno;
      ::unlink(tmp.c_str());
      errno = saved;
      fail("fsync failed on", tmp);
    }
    if (::close(fd.release()) != 0) {
      ::unlink(tmp.c_str());
      fail("close failed on", tmp);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail(str_cat("cannot rename '", tmp, "' to"), path);
  }
  // The rename is durable only once the directory entry is on disk.
  const std::string dir = directory_of(path);
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) fail("cannot open directory", dir);
  if (::fsync(dir_fd.get()) != 0) fail("fsync failed on directory", dir);
  remove_dead_writers_leftovers(path);
}

std::vector<uint8_t> read_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat", path);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > max_bytes)
    throw Error(
        str_cat("file '", path, "' is ", size, " bytes, more than the limit of ", max_bytes));
  std::vector<uint8_t> out(size);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd.get(), out.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read", path);
    if (n == 0) break;  // shrank while we read
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace collie::nn
