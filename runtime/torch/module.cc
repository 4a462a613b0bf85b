// The extension module collie_torch._C. The package collie_torch
// (python/collie_torch/__init__.py) imports it and registers the
// torch.distributed backend "collie" with _create_backend as its creator:
//
//   import torch.distributed as dist
//   dist.init_process_group("collie")   # instead of "gloo"
//
// torch then calls _create_backend for every group whose backend (for a
// device) is "collie", with the group's store, rank, size, timeout and name
// (the "extended API" of Backend.register_backend), and registers the
// BackendCollie it returns under the group's ProcessGroup.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <time.h>

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/build_info.h"
#include "collie/runtime/process_group/flight_recorder.h"
#include "collie/runtime/torch/backend_collie.h"
#include "collie/runtime/torch/timeline_bindings.h"

#ifndef COLLIE_TORCH_BUILT_FOR
#define COLLIE_TORCH_BUILT_FOR "unknown"
#endif

namespace py = pybind11;

namespace collie::torch_adapter {
namespace {

// torch's creator call: `opts` is a c10d _DistributedBackendOptions (store,
// group_rank, group_size, timeout, group_id, global_ranks_in_group: empty
// for the world); `pg_options` is unused. `group_desc`: what torch will
// name the group (collie_torch's Python creator finds it), for the flight
// recorder.
c10::intrusive_ptr<BackendCollie> create_backend(const py::object& opts,
                                                 const py::object& /*pg_options*/,
                                                 const std::optional<std::string>& group_desc) {
  auto store = opts.attr("store").cast<c10::intrusive_ptr<::c10d::Store>>();
  const int rank = opts.attr("group_rank").cast<int>();
  const int size = opts.attr("group_size").cast<int>();
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      opts.attr("timeout").cast<std::chrono::duration<double>>());
  BackendCollie::Identity who;
  who.group_name = opts.attr("group_id").cast<std::string>();
  if (group_desc && !group_desc->empty()) who.group_desc = *group_desc;
  if (py::hasattr(opts, "global_ranks_in_group"))
    who.global_ranks = opts.attr("global_ranks_in_group").cast<std::vector<int>>();
  // The rendezvous blocks; other Python threads may run meanwhile.
  py::gil_scoped_release no_gil;
  if (log_rank() < 0) set_log_rank(rank);
  const std::string group_name = who.group_name;
  auto backend = BackendCollie::create(store, rank, size, timeout, std::move(who));
  start_timeline_from_env(store, rank, size, group_name);  // COLLIE_TRACE
  return backend;
}

void without_gil(const std::function<void()>& wait) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    wait();
  } else {
    wait();
  }
}

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// `iters` blocking all_reduces (sum) of `tensor`, timed in C++ with the GIL
// released: through collie's own ProcessGroup ("collie") or through this
// adapter's c10d::Backend ("adapter"). Returns (wall, process CPU, calling
// thread's CPU) seconds per call; the difference between the paths is what
// the adapter adds to collie's call. Every rank must make the same call.
std::tuple<double, double, double> time_allreduce(BackendCollie& backend, at::Tensor tensor,
                                                  int iters, const std::string& path) {
  if (path != "collie" && path != "adapter")
    throw InvalidArgument(
        str_cat("time_allreduce: path \"", path, "\" is neither \"collie\" nor \"adapter\""));
  if (!tensor.is_contiguous() || tensor.scalar_type() != at::kFloat || !tensor.is_cpu() ||
      iters < 1)
    throw InvalidArgument("time_allreduce: expects a contiguous float32 CPU tensor and iters >= 1");
  py::gil_scoped_release no_gil;
  std::vector<at::Tensor> tensors{tensor};
  const TensorView view{tensor.data_ptr(), static_cast<size_t>(tensor.numel()), DataType::kFloat32,
                        Device::cpu()};
  ::c10d::AllreduceOptions opts;
  opts.asyncOp = false;
  const bool direct = path == "collie";
  collie::ProcessGroup& group = backend.cpu_group();
  const double process_start = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
  const double thread_start = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    if (direct)
      group.all_reduce(view, {.async_op = false})->wait();
    else
      backend.allreduce(tensors, opts)->wait();
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
  return {wall.count() / iters, (cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - process_start) / iters,
          (cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - thread_start) / iters};
}

// A Work's exception() as its message (None when there is none), for the
// tests: the message of collie's own error, before wait() maps it.
std::optional<std::string> work_exception(const c10::intrusive_ptr<::c10d::Work>& work) {
  const std::exception_ptr error = work->exception();
  if (!error) return std::nullopt;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return std::string(e.what());
  } catch (...) {
    return std::string("(an exception that is not a std::exception)");
  }
}

}  // namespace
}  // namespace collie::torch_adapter

PYBIND11_MODULE(_C, m) {
  using namespace collie::torch_adapter;
  m.doc() = "collie's torch.distributed backend (import collie_torch, not this module)";
  // Backend's Python class must exist before a subclass is declared.
  py::module_::import("torch.distributed");
  BackendCollie::set_blocking(&without_gil);

  py::class_<BackendCollie, ::c10d::Backend, c10::intrusive_ptr<BackendCollie>>(m, "BackendCollie")
      .def_property_readonly("group_name", &BackendCollie::group_name)
      .def_property_readonly("timeout", &BackendCollie::default_timeout,
                             "The default deadline of the next operation (a timedelta): the "
                             "group's timeout, or what set_timeout set.")
      .def(
          "queue_stats",
          [](const BackendCollie& b) {
            return py::dict(py::arg("inline_runs") = b.executor().inline_runs(),
                            py::arg("worker_runs") = b.executor().worker_runs());
          },
          "How many CPU operations ran on a calling thread (blocking calls, helping waiters) "
          "and how many on the group's worker thread.");

  m.def("_create_backend", &create_backend, py::arg("opts"), py::arg("pg_options") = py::none(),
        py::arg("group_desc") = py::none());
  m.def("_time_allreduce", &time_allreduce, py::arg("backend"), py::arg("tensor"), py::arg("iters"),
        py::arg("path"));
  m.def("_work_exception", &work_exception, py::arg("work"),
        "The message of a Work's stored error (collie's own), or None.");
  m.def(
      "_quiesce_all",
      [](double grace_s) {
        BackendCollie::quiesce_all(std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1e3)));
      },
      py::arg("grace_s"),
      "At exit: let every live group finish its operations (at most grace_s), then abort the "
      "rest.");
  // The flight recorder (collie_torch.dump_flight_recorder()).
  m.def("_torch_recorder_attached", &BackendCollie::torch_recorder_attached,
        "Whether torch's FlightRecorderHook is attached to a live collie group (torch 2.15).");
  m.def(
      "_dump_flight_recorder",
      [](const std::string& why) {
        py::gil_scoped_release no_gil;
        return collie::dump_flight_recorder(why);
      },
      py::arg("why"), "Writes collie's own flight recorder dump now; returns its path.");
  add_timeline_bindings(m);  // collie_torch.timeline
  m.def("build_info", &collie::build_info, "collie's version and optional parts");
  m.attr("BACKEND_NAME") = BackendCollie::kBackendName;
  m.attr("TORCH_BUILT_FOR") = COLLIE_TORCH_BUILT_FOR;
}
