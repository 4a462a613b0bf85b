#include "runtime/launcher/log_hints.h"

#include <mutex>

namespace collie::launcher {
namespace {

std::mutex hints_mutex;
std::vector<std::string> hints;

}  // namespace

void collect_hint(LogLevel level, std::string_view line) {
  if (level < LogLevel::kWarn || line.find("--store-compat") == std::string_view::npos) return;
  // Without the "[collie] W 12:00:00.000 file.cc:12] " prefix.
  const size_t first = line.find("] ");
  const size_t second = first == std::string_view::npos ? first : line.find("] ", first + 2);
  if (second != std::string_view::npos) line.remove_prefix(second + 2);
  std::lock_guard<std::mutex> lock(hints_mutex);
  if (hints.empty()) hints.emplace_back(line);  // the first one says it all
}

std::vector<std::string> collected_hints() {
  std::lock_guard<std::mutex> lock(hints_mutex);
  return hints;
}

}  // namespace collie::launcher
