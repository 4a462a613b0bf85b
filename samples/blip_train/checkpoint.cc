#include "collie/samples/blip_train/checkpoint.h"

#include <charconv>
#include <system_error>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/state_dict.h"

namespace collie::samples {

namespace {

// The metadata holds strings: numbers go in as the shortest text that reads
// back to the same value.
template <typename T>
std::string to_text(T value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, end);
}

template <typename T>
T from_text(const nn::StateDict& dict, const std::string& key) {
  const std::string text = dict.get_string(key);
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw InvalidArgument(str_cat("metadata '", key, "' is \"", text, "\", not a number"));
  return value;
}

}  // namespace

void save_checkpoint(const std::string& path, nn::Module& model, const nn::Optimizer& optimizer,
                     const CheckpointInfo& info) {
  nn::StateDict dict;
  nn::save_module_state(model, dict);  // torch's keys: "1.weight", ...
  optimizer.save_state(dict, "optimizer.");
  dict.set_string("epoch", to_text(info.epoch));
  dict.set_string("best_acc", to_text(info.best_acc));
  dict.set_string("config", info.config_json);
  nn::save_state_dict(dict, path);  // atomic: tmp + fsync + rename
}

CheckpointInfo load_checkpoint(const std::string& path, nn::Module& model,
                               nn::Optimizer& optimizer) {
  nn::StateDict dict = nn::load_state_dict(path);  // names the file in its errors
  try {
    // The earlier format kept the model under "model." and the epoch as an
    // int64 entry, not as metadata.
    const bool earlier = !dict.has_string("epoch") && dict.contains("epoch");
    nn::load_module_state(model, dict, earlier ? "model." : "");
    optimizer.load_state(dict, "optimizer.");
    CheckpointInfo info;
    info.epoch = earlier ? dict.get_int("epoch") : from_text<int64_t>(dict, "epoch");
    info.best_acc = earlier ? dict.get_double("best_acc") : from_text<double>(dict, "best_acc");
    info.config_json = dict.get_string("config");
    return info;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(str_cat("checkpoint ", path, ": ", e.what()));
  }
}

}  // namespace collie::samples
