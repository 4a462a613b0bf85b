#include "collie/runtime/api/backend_registry.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>

#include "collie/base/config.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/per_device_process_group.h"
#include "collie/runtime/cpu/cpu_process_group.h"
#if COLLIE_HAVE_CUDA
#include "collie/runtime/cuda/cuda_device.h"
#endif
#if COLLIE_HAVE_NCCL
#include "collie/runtime/nccl/nccl_process_group.h"
#endif

namespace collie {
namespace {

// Why NCCL cannot run here, judged from what this build contains and what
// the machine has. The NCCL backend, once it registers itself, reuses this
// for its own availability probe.
std::string nccl_unavailable_reason() {
#if !COLLIE_HAVE_NCCL
  return "collie was built without NCCL (COLLIE_HAVE_NCCL=0); rebuild with the CUDA "
         "toolkit and NCCL installed, or use backend \"cpu\"";
#else
  if (cuda::device_count() == 0)
    return str_cat("no CUDA device is visible (", cuda::no_device_reason(), ")");
  return "";
#endif
}

// The built-in entries. A backend compiled into collie_runtime is listed
// here, explicitly: a static-initializer registration inside a static
// library would be dropped by the linker when nothing references its object
// file. "nccl" is always listed so that asking for it explains why it cannot
// run instead of calling it unknown.
std::map<std::string, BackendEntry> builtin_backends() {
  std::map<std::string, BackendEntry> entries;
  entries["cpu"] = BackendEntry{[](const BackendContext& context) -> std::shared_ptr<ProcessGroup> {
                                  return CpuProcessGroup::create(context);
                                },
                                [] { return std::string(); },
                                [](const BackendContext& context) -> std::shared_ptr<ProcessGroup> {
                                  return CpuProcessGroup::join(context);
                                }};
  entries["nccl"] = BackendEntry{
      [](const BackendContext& context) -> std::shared_ptr<ProcessGroup> {
        std::string reason = nccl_unavailable_reason();
        if (!reason.empty())
          throw BackendError(str_cat("backend \"nccl\" requested by rank ", context.rank,
                                     " cannot run: ", reason));
#if COLLIE_HAVE_NCCL
        NcclOptions options;
        options.timeout = context.timeout;
        options.group_name = context.group_name;
        return NcclProcessGroup::create(context.store, context.rank, context.size, options);
#else
        return nullptr;  // unreachable: the reason above is never empty
#endif
      },
      &nccl_unavailable_reason};
  return entries;
}

struct Registry {
  std::mutex mu;
  std::map<std::string, BackendEntry> entries = builtin_backends();
};

Registry& registry() {
  static Registry r;
  return r;
}

// Lower case, and "socket" (the cpu backend's old name) read as "cpu".
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "socket" ? "cpu" : s;
}

// Copies the entry out so that its functions run without the lock held.
bool find_entry(const std::string& name, BackendEntry* entry) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.entries.find(name);
  if (it == r.entries.end()) return false;
  *entry = it->second;
  return true;
}

}  // namespace

void register_backend(const std::string& name, BackendEntry entry) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.entries[lower(name)] = std::move(entry);
}

std::vector<std::string> registered_backends() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, entry] : r.entries) names.push_back(name);
  return names;
}

std::string backend_unavailable_reason(const std::string& name) {
  BackendEntry entry;
  if (!find_entry(lower(name), &entry))
    return str_cat("no backend named \"", name, "\" (known: ", join(registered_backends(), ", "),
                   ")");
  return entry.unavailable_reason ? entry.unavailable_reason() : std::string();
}

bool is_backend_available(const std::string& name) {
  return backend_unavailable_reason(name).empty();
}

namespace {

// The device type a backend serves when named alone.
std::optional<DeviceType> device_of(const std::string& backend) {
  if (backend == "cpu") return DeviceType::kCPU;
  if (backend == "nccl") return DeviceType::kCUDA;
  return std::nullopt;
}

std::string known_names() { return str_cat(join(registered_backends(), ", "), ", auto"); }

}  // namespace

BackendSpec parse_backend_spec(const std::string& text) {
  BackendSpec spec;
  spec.text = text;
  const std::string t = lower(text);
  if (t.empty())
    throw InvalidArgument(
        "backend is empty: expected \"cpu\", \"nccl\", \"auto\" or \"cpu:cpu,cuda:nccl\"");
  if (t == "auto") {
    spec.cpu = "cpu";
    if (std::string why = backend_unavailable_reason("nccl"); why.empty()) {
      spec.cuda = "nccl";
    } else {
      spec.cuda_why = str_cat("\"auto\" found no usable NCCL: ", why);
    }
    return spec;
  }
  if (t.find(':') == std::string::npos) {
    auto known = registered_backends();
    if (std::find(known.begin(), known.end(), t) == known.end())
      throw InvalidArgument(str_cat("unknown backend \"", text, "\" (known: ", known_names(), ")"));
    const auto device = device_of(t);
    if (device == DeviceType::kCUDA) {
      spec.cuda = t;
      spec.cpu_why = str_cat("backend \"", t,
                             "\" serves cuda buffers only; use \"auto\" or \"cpu:cpu,cuda:", t,
                             "\" for host buffers too");
    } else {  // cpu, and any registered backend of unknown kind: host buffers
      spec.cpu = t;
      spec.cuda_why =
          str_cat("backend \"", t, "\" serves cpu buffers only; use \"auto\" or \"cpu:", t,
                  ",cuda:nccl\" for cuda buffers too");
    }
    return spec;
  }
  // "cpu:cpu,cuda:nccl": device:backend pairs, each device type once.
  size_t pos = 0;
  while (pos <= t.size()) {
    const size_t comma = std::min(t.find(',', pos), t.size());
    const std::string pair = t.substr(pos, comma - pos);
    const size_t colon = pair.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == pair.size())
      throw InvalidArgument(str_cat("backend \"", text, "\": \"", pair,
                                    "\" is not device:backend (e.g. \"cpu:cpu,cuda:nccl\")"));
    const std::string device = pair.substr(0, colon), name = lower(pair.substr(colon + 1));
    std::string* slot = device == "cpu" ? &spec.cpu : device == "cuda" ? &spec.cuda : nullptr;
    if (slot == nullptr)
      throw InvalidArgument(str_cat("backend \"", text, "\": unknown device type \"", device,
                                    "\" (known: cpu, cuda)"));
    if (!slot->empty())
      throw InvalidArgument(str_cat("backend \"", text, "\": ", device, " is given twice"));
    auto known = registered_backends();
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InvalidArgument(str_cat("backend \"", text, "\": unknown backend \"", name,
                                    "\" (known: ", join(known, ", "), ")"));
    if (const auto serves = device_of(name);
        serves && *serves != (device == "cpu" ? DeviceType::kCPU : DeviceType::kCUDA))
      throw InvalidArgument(
          str_cat("backend \"", text, "\": ", name, " cannot serve ", device, " buffers"));
    *slot = name;
    pos = comma + 1;
  }
  if (spec.cpu.empty()) spec.cpu_why = str_cat("backend \"", text, "\" names no cpu backend");
  if (spec.cuda.empty()) spec.cuda_why = str_cat("backend \"", text, "\" names no cuda backend");
  return spec;
}

std::string backend_spec_unavailable_reason(const BackendSpec& spec) {
  for (const std::string* name : {&spec.cpu, &spec.cuda}) {
    if (name->empty()) continue;
    if (std::string why = backend_unavailable_reason(*name); !why.empty())
      return str_cat("backend \"", *name, "\" cannot run here: ", why);
  }
  return "";
}

std::shared_ptr<ProcessGroup> create_process_group(const BackendSpec& spec,
                                                   const BackendContext& context) {
  PerDeviceProcessGroup::Slot cpu{nullptr, spec.cpu_why}, cuda{nullptr, spec.cuda_why};
  if (!spec.cpu.empty()) cpu.backend = create_backend(spec.cpu, context);
  if (!spec.cuda.empty()) cuda.backend = create_backend(spec.cuda, context);
  return std::make_shared<PerDeviceProcessGroup>(context.rank, context.size, spec.text,
                                                 std::move(cpu), std::move(cuda));
}

std::shared_ptr<ProcessGroup> join_process_group(const BackendSpec& spec,
                                                 const BackendContext& context) {
  if (!spec.cuda.empty())
    throw BackendError(str_cat("joining a running group: backend \"", spec.cuda,
                               "\" (cuda) cannot be joined; only the cpu backend can"));
  BackendEntry entry;
  if (!find_entry(lower(spec.cpu), &entry) || !entry.join)
    throw BackendError(str_cat("joining a running group: backend \"", spec.cpu,
                               "\" cannot be joined; only the cpu backend can"));
  auto cpu = entry.join(context);
  const int rank = cpu->rank(), size = cpu->size();
  return std::make_shared<PerDeviceProcessGroup>(
      rank, size, spec.text, PerDeviceProcessGroup::Slot{std::move(cpu), ""},
      PerDeviceProcessGroup::Slot{nullptr, spec.cuda_why});
}

std::shared_ptr<ProcessGroup> create_backend(const std::string& name,
                                             const BackendContext& context) {
  BackendEntry entry;
  if (!find_entry(lower(name), &entry))
    throw InvalidArgument(str_cat("unknown backend \"", name, "\" (known: ",
                                  join(registered_backends(), ", "), ", or \"auto\")"));
  return entry.create(context);
}

}  // namespace collie
