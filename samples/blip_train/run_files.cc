#include "samples/blip_train/run_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <system_error>

#include "nn/atomic_file.h"
#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie::samples {

namespace fs = std::filesystem;

namespace {

// "<what> '<path>': No space left on device (errno 28)".
[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw Error(str_cat(what, " '", path, "': ", std::strerror(err), " (errno ", err, ")"));
}

}  // namespace

std::string output_dir_for(const std::string& output_dir_flag, const std::string& resume,
                           bool evaluate) {
  if (!output_dir_flag.empty()) return output_dir_flag;
  if (evaluate) return "";
  if (!resume.empty()) {
    const fs::path folder = fs::path(resume).parent_path();
    return folder.empty() ? "." : folder.string();
  }
  return kDefaultOutputDir;
}

void create_output_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create the output folder", dir, ec.value());
}

void write_config_json(const std::string& dir, const std::string& json) {
  const std::string path = (fs::path(dir) / "config.json").string();
  try {
    const std::string text = json + "\n";
    nn::write_file_atomically(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  } catch (const Error& e) {
    throw Error(str_cat("cannot write ", path, ": ", e.what()));
  }
}

RunLog::RunLog(std::string path) : path_(std::move(path)) {
  file_.reset(std::fopen(path_.c_str(), "ae"));  // append, close-on-exec
  if (!file_) fail("cannot open the log", path_, errno);
}

void RunLog::append(const std::string& line) {
  errno = 0;
  const bool ok = std::fputs(line.c_str(), file_.get()) >= 0 &&
                  std::fputc('\n', file_.get()) != EOF && std::fflush(file_.get()) == 0;
  if (!ok) fail("cannot append to the log", path_, errno != 0 ? errno : EIO);
}

std::optional<int64_t> json_int(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": (-?[0-9]{1,18})[,}]")))
    return std::nullopt;
  return std::stoll(m[1]);
}

}  // namespace collie::samples
