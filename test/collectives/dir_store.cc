#include "test/collectives/dir_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie::test {

std::string DirStore::path(const std::string& key) const {
  std::string name = key;
  for (char& c : name) {
    if (c == '/') c = '%';
  }
  return dir_ + "/" + name;
}

void DirStore::set(const std::string& key, std::span<const uint8_t> value) {
  const std::string tmp = str_cat(path(key), ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(value.data()),
              static_cast<std::streamsize>(value.size()));
  }
  std::filesystem::rename(tmp, path(key));
}

Bytes DirStore::get(const std::string& key) {
  wait({key});
  std::ifstream in(path(key), std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

bool DirStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    if (!std::filesystem::exists(path(k))) return false;
  }
  return true;
}

void DirStore::wait(const std::vector<std::string>& keys, Timeout timeout) {
  const Deadline deadline(resolve_timeout(timeout, timeout_));
  auto backoff = std::chrono::microseconds(200);
  while (!check(keys)) {
    if (deadline.expired()) {
      throw TimeoutError(
          str_cat("DirStore: keys ", join(keys, ", "), " never appeared ", deadline.describe()));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(20'000));
  }
}

int64_t DirStore::add(const std::string& key, int64_t) {
  throw Error("DirStore (a test helper) does not implement add: " + key);
}
Bytes DirStore::compare_set(const std::string& key, std::span<const uint8_t>,
                            std::span<const uint8_t>) {
  throw Error("DirStore (a test helper) does not implement compare_set: " + key);
}
bool DirStore::delete_key(const std::string& key) { return std::filesystem::remove(path(key)); }
int64_t DirStore::num_keys() {
  return std::distance(std::filesystem::directory_iterator(dir_),
                       std::filesystem::directory_iterator());
}

}  // namespace collie::test
