#include "runtime/api/backend_registry.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"
#include "runtime/socket/socket_process_group.h"
#if COLLIE_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif
#if COLLIE_HAVE_NCCL
#include "runtime/nccl/nccl_process_group.h"
#endif

namespace collie {
namespace {

// Why NCCL cannot run here, judged from what this build contains and what
// the machine has. The NCCL backend, once it registers itself, reuses this
// for its own availability probe.
std::string nccl_unavailable_reason() {
#if !COLLIE_HAVE_NCCL
  return "collie was built without NCCL (COLLIE_HAVE_NCCL=0); rebuild with the CUDA "
         "toolkit and NCCL installed, or use backend \"socket\"";
#else
  if (cuda::device_count() == 0)
    return str_cat("no CUDA device is visible (", cuda::no_device_reason(),
                   "); use backend \"socket\" or \"auto\"");
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
  entries["socket"] =
      BackendEntry{[](const BackendContext& context) -> std::shared_ptr<ProcessGroup> {
                     return SocketProcessGroup::create(context);
                   },
                   [] { return std::string(); }};
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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
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

std::string resolve_backend_name(const std::string& name) {
  std::string n = lower(name);
  if (n.empty())
    throw InvalidArgument("backend name is empty: expected \"socket\", \"nccl\" or \"auto\"");
  if (n != "auto") return n;
  return is_backend_available("nccl") ? "nccl" : "socket";
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
