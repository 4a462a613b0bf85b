// collie's timeline (runtime/process_group/timeline.h) from Python: the
// functions collie_torch.timeline wraps, and COLLIE_TRACE for torch
// programs.
#pragma once

#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

namespace collie::torch_adapter {

// Adds _timeline_start, _timeline_span, _timeline_enabled and
// _timeline_finish to the module, and has Python's atexit finish a
// timeline still recording (after the groups are quiesced).
void add_timeline_bindings(pybind11::module_& m);

// COLLIE_TRACE=FILE: the default group's creation ("0") starts the
// timeline over its store (collective: every rank creates the group).
void start_timeline_from_env(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                             const std::string& group_name);

}  // namespace collie::torch_adapter
