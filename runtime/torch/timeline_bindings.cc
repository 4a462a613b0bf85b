#include "collie/runtime/torch/timeline_bindings.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "collie/rendezvous/env/launch_env.h"
#include "collie/runtime/process_group/timeline.h"
#include "collie/runtime/torch/torch_store.h"

namespace py = pybind11;

namespace collie::torch_adapter {
namespace {

std::shared_ptr<Store> wrap(const c10::intrusive_ptr<::c10d::Store>& store) {
  return store ? std::make_shared<TorchStore>(store) : nullptr;
}

// A span's argument names and categories must outlive the timeline
// (timeline::span keeps the pointers): Python's strings are interned here,
// a handful per program.
const char* intern(const std::string& s) {
  static std::mutex mu;
  static std::set<std::string> names;
  std::lock_guard lock(mu);
  return names.insert(s).first->c_str();
}

}  // namespace

void start_timeline_from_env(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                             const std::string& group_name) {
  if (group_name != "0" || timeline::enabled()) return;
  const auto path = process_env("COLLIE_TRACE");
  if (!path || path->empty()) return;
  timeline::start(*path, rank, size, size > 1 ? wrap(store) : nullptr);
}

void add_timeline_bindings(py::module_& m) {
  m.def(
      "_timeline_start",
      [](const std::string& path, int rank, int world_size,
         const c10::intrusive_ptr<::c10d::Store>& store) {
        py::gil_scoped_release no_gil;  // collective: waits for the other ranks
        timeline::start(path, rank, world_size, world_size > 1 ? wrap(store) : nullptr);
      },
      py::arg("path"), py::arg("rank"), py::arg("world_size"), py::arg("store") = nullptr);
  m.def("_timeline_enabled", &timeline::enabled);
  m.def(
      "_timeline_span",
      [](const std::string& track, const std::string& name, int64_t start_ns, int64_t end_ns,
         const std::string& cat, const std::map<std::string, int64_t>& args) {
        if (!timeline::enabled()) return;
        std::vector<timeline::Arg> list;
        for (const auto& [key, value] : args) list.emplace_back(intern(key), value);
        timeline::span(track, name, start_ns, end_ns, list, intern(cat));
      },
      py::arg("track"), py::arg("name"), py::arg("start_ns"), py::arg("end_ns"),
      py::arg("cat") = "user", py::arg("args") = std::map<std::string, int64_t>{});
  m.def("_timeline_finish", [] {
    py::gil_scoped_release no_gil;  // collective
    return timeline::finish();
  });
  // COLLIE_TRACE without an explicit finish(): at exit. Registered before
  // the package's own atexit hooks, so it runs after them (the groups are
  // quiesced by then; the store it needs is still held).
  py::module_::import("atexit").attr("register")(m.attr("_timeline_finish"));
}

}  // namespace collie::torch_adapter
