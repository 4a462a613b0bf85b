#include "collie/samples/blip_train/run_files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <system_error>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/atomic_file.h"

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

void claim_output_dir(const std::string& dir, const std::string& resume, bool overwrite) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<std::string> work;  // what another run left
  std::vector<fs::path> run_files;
  static const std::regex checkpoint(R"(checkpoint_([0-9]+|best)\.pth)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, checkpoint)) {
      work.push_back(name);
      run_files.push_back(entry.path());
    } else if (name == "log.txt" || name == "config.json") {
      run_files.push_back(entry.path());
      if (name == "log.txt" && fs::file_size(entry.path(), ec) > 0 && !ec) work.push_back(name);
    }
  }
  if (work.empty()) return;
  if (!resume.empty()) {
    const fs::path mine = fs::weakly_canonical(dir, ec);
    const fs::path theirs = fs::weakly_canonical(
        fs::path(resume).parent_path().empty() ? fs::path(".") : fs::path(resume).parent_path(),
        ec);
    if (mine == theirs) return;  // the run it resumes goes on
  }
  if (overwrite) {
    for (const auto& f : run_files) {
      fs::remove(f, ec);
      if (ec) fail("--overwrite: cannot remove", f.string(), ec.value());
    }
    return;
  }
  std::sort(work.begin(), work.end());
  const size_t shown = std::min<size_t>(work.size(), 6);
  std::string list;
  for (size_t i = 0; i < shown; ++i) list += (i ? ", " : "") + work[i];
  if (work.size() > shown) list += str_cat(", and ", work.size() - shown, " more");
  throw InvalidArgument(
      str_cat("the output folder ", dir, " holds another run's files (", list, "): pass --resume ",
              (fs::path(dir) / "checkpoint_NN.pth").string(),
              " to continue that run, --overwrite to replace it, or another --output-dir"));
}

void create_output_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create the output folder", dir, ec.value());
}

namespace {

void append_json(const nlohmann::ordered_json& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    const char* separator = "";
    for (const auto& [key, item] : value.items()) {
      out += separator;
      out += nlohmann::ordered_json(key).dump();
      out += ": ";
      append_json(item, out);
      separator = ", ";
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    const char* separator = "";
    for (const auto& item : value) {
      out += separator;
      append_json(item, out);
      separator = ", ";
    }
    out += ']';
  } else {
    out += value.dump();
  }
}

}  // namespace

std::string json_line(const nlohmann::ordered_json& value) {
  std::string out;
  append_json(value, out);
  return out;
}

void write_config_json(const std::string& dir, const nlohmann::ordered_json& config) {
  const std::string path = (fs::path(dir) / "config.json").string();
  try {
    const std::string text = json_line(config) + "\n";
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
  const auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace collie::samples
