#include "collie/runtime/launcher/on_failure.h"

namespace collie::launcher {

const char* on_failure_name(OnFailure mode) {
  switch (mode) {
    case OnFailure::kStop: return "stop";
    case OnFailure::kShrink: return "shrink";
    case OnFailure::kReplace: return "replace";
  }
  return "stop";
}

std::optional<OnFailure> parse_on_failure(const std::string& text) {
  for (OnFailure mode : {OnFailure::kStop, OnFailure::kShrink, OnFailure::kReplace})
    if (text == on_failure_name(mode)) return mode;
  return std::nullopt;
}

}  // namespace collie::launcher
