// The Python module collie_torch. Importing it registers the torch.distributed
// backend "collie":
//
//   import collie_torch
//   torch.distributed.init_process_group("collie")   # instead of "gloo"
//
// torch then calls _create_process_group for every group whose backend is
// "collie" (the default group, new_group(backend="collie")), with the group's
// store, rank, size, timeout and name (the "extended API" of
// Backend.register_backend), and uses the ProcessGroupCollie it returns like
// any of its own backends.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <time.h>

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/api/build_info.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"
#include "runtime/torch/process_group_collie.h"

namespace py = pybind11;

namespace collie {
namespace {

// How Python holds a ProcessGroupCollie: an intrusive_ptr (torch reads the
// holder of its ProcessGroup subclasses as one, so the layout must stay a
// lone intrusive_ptr) whose release happens without the GIL. Destroying the
// group waits for its queued operations, and completing one may run a
// Python callback chained on its future, which needs the GIL.
template <typename T>
class GilFreeRelease {
 public:
  GilFreeRelease() = default;
  explicit GilFreeRelease(T* raw)
      : ptr_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(raw)) {}
  explicit GilFreeRelease(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  GilFreeRelease(const GilFreeRelease&) = default;
  GilFreeRelease(GilFreeRelease&&) noexcept = default;
  GilFreeRelease& operator=(const GilFreeRelease&) = default;
  GilFreeRelease& operator=(GilFreeRelease&&) noexcept = default;
  ~GilFreeRelease() {
    if (ptr_ && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      ptr_.reset();
    }
  }
  T* get() const { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};

}  // namespace
}  // namespace collie

PYBIND11_DECLARE_HOLDER_TYPE(T, collie::GilFreeRelease<T>, true);

namespace collie {
namespace {

using PyGroup = GilFreeRelease<ProcessGroupCollie>;

// torch's creator call: `opts` is a c10d _DistributedBackendOptions (store,
// group_rank, group_size, timeout, group_id); `pg_options` is unused.
PyGroup create_process_group(const py::object& opts, const py::object& /*pg_options*/) {
  auto store = opts.attr("store").cast<c10::intrusive_ptr<::c10d::Store>>();
  const int rank = opts.attr("group_rank").cast<int>();
  const int size = opts.attr("group_size").cast<int>();
  const auto timeout = opts.attr("timeout").cast<std::chrono::milliseconds>();
  const std::string group_name = opts.attr("group_id").cast<std::string>();
  // The rendezvous blocks; other Python threads may run meanwhile.
  py::gil_scoped_release no_gil;
  if (log_rank() < 0) set_log_rank(rank);
  return PyGroup(ProcessGroupCollie::create(store, rank, size, timeout, group_name));
}

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// `iters` blocking all_reduces (sum) of `tensor`, timed in C++ with the GIL
// released: through collie's own ProcessGroup ("collie") or through this
// adapter's c10d interface ("adapter"). Returns (wall, process CPU, calling
// thread's CPU) seconds per call; the difference between the paths is what
// the adapter adds to collie's call. The calling thread's CPU time is the
// steadiest figure on a host whose cores are shared; the process's also
// counts the queue's worker thread. Every rank must make the same call.
std::tuple<double, double, double> time_allreduce(ProcessGroupCollie& pg, at::Tensor tensor,
                                                  int iters, const std::string& path) {
  if (path != "collie" && path != "adapter")
    throw InvalidArgument(
        str_cat("time_allreduce: path \"", path, "\" is neither \"collie\" nor \"adapter\""));
  if (!tensor.is_contiguous() || tensor.scalar_type() != at::kFloat || iters < 1)
    throw InvalidArgument("time_allreduce: expects a contiguous float32 tensor and iters >= 1");
  py::gil_scoped_release no_gil;
  std::vector<at::Tensor> tensors{tensor};
  const TensorView view{tensor.data_ptr(), static_cast<size_t>(tensor.numel()), DataType::kFloat32,
                        Device::cpu()};
  const bool direct = path == "collie";
  const double process_start = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
  const double thread_start = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    if (direct)
      pg.collie_group().all_reduce(view, {.async_op = false})->wait();
    else
      pg.allreduce(tensors, {})->wait();
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
  return {wall.count() / iters, (cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - process_start) / iters,
          (cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - thread_start) / iters};
}

// Work.exception()'s message (None when there is none): torch 1.13 binds
// Work.exception but has no converter for std::exception_ptr, so Python
// cannot call it; the tests read collie's override through this.
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
}  // namespace collie

PYBIND11_MODULE(collie_torch, m) {
  using namespace collie;
  m.doc() = "collie as a torch.distributed backend: import it, then init_process_group(\"collie\")";
  // ProcessGroup's Python class must exist before a subclass is declared.
  py::module_ dist = py::module_::import("torch.distributed");

  py::class_<ProcessGroupCollie, ::c10d::ProcessGroup, PyGroup>(m, "ProcessGroupCollie")
      .def_property_readonly("group_name", &ProcessGroupCollie::group_name)
      .def(
          "queue_stats",
          [](const ProcessGroupCollie& pg) {
            return py::dict(py::arg("inline_runs") = pg.queue().inline_runs(),
                            py::arg("worker_runs") = pg.queue().worker_runs());
          },
          "How many operations ran on the thread that waited for them, and how many on the "
          "group's worker thread.");

  m.def("_create_process_group", &create_process_group, py::arg("opts"),
        py::arg("pg_options") = py::none());
  m.def("_time_allreduce", &time_allreduce, py::arg("group"), py::arg("tensor"), py::arg("iters"),
        py::arg("path"));
  m.def("_work_exception", &work_exception, py::arg("work"),
        "Work.exception()'s message, or None (torch 1.13 cannot convert it itself).");
  m.def("build_info", &build_info, "collie's version and optional parts");
  m.attr("BACKEND_NAME") = ProcessGroupCollie::kBackendName;

  dist.attr("Backend").attr("register_backend")(ProcessGroupCollie::kBackendName,
                                                m.attr("_create_process_group"),
                                                py::arg("extended_api") = true);
}
