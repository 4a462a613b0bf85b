#include "collie/test/support/temp_dir.h"

#include <stdlib.h>
#include <string.h>

#include <cerrno>
#include <filesystem>

#include "collie/base/error.h"

namespace collie::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/collie-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw Error("mkdtemp(" + tmpl + "): " + strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace collie::test
