// The backend registry: process-group backends by name ("cpu", "nccl"),
// each with a factory and an availability probe. init_process_group and
// new_group look the backend up here, so nothing above this file names a
// concrete backend. The built-in backends are listed in backend_registry.cc;
// an embedder's own backend plugs in with register_backend.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collie/rendezvous/store.h"
#include "collie/runtime/process_group/backend_context.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie {

struct BackendEntry {
  // Builds the group; the call is collective (every member calls it).
  std::function<std::shared_ptr<ProcessGroup>(const BackendContext&)> create;
  // Empty when the backend can run on this machine, else why not ("no CUDA
  // device: ..."); called for is_available(name) and "auto".
  std::function<std::string()> unavailable_reason;
  // Joins a running group of this backend as a new rank (Growable; the
  // context's rank and size are ignored); empty when the backend cannot.
  std::function<std::shared_ptr<ProcessGroup>(const BackendContext&)> join = {};
};

// Adds or replaces a backend: torch's Backend.register_backend(name, func).
// Afterwards init_process_group({.backend = name}) and new_group(ranks,
// timeout, name) build their groups with entry.create, in every process that
// registered it (register before init_process_group, on every rank). Names
// are case-insensitive. A backend may wrap another: its create may call
// create_backend("cpu", context), as the test of this function does
// (test/runtime/api/backend_registry_test.cc). Thread-safe.
void register_backend(const std::string& name, BackendEntry entry);
// The registered names, sorted.
std::vector<std::string> registered_backends();
// True when `name` is registered and can run here.
bool is_backend_available(const std::string& name);
// Why `name` cannot run here ("" when it can).
std::string backend_unavailable_reason(const std::string& name);
// Builds a group of backend `name`; throws BackendError naming the backend
// and the reason when it cannot run here, InvalidArgument when the name is
// unknown (listing the known ones).
std::shared_ptr<ProcessGroup> create_backend(const std::string& name,
                                             const BackendContext& context);

// A backend string as init_process_group and new_group take it, torch 2.x's
// syntax: one backend per device type.
//   "cpu:cpu,cuda:nccl"     both, explicitly (each must be able to run here)
//   "cpu" / "nccl"          one device type
//   "auto"                  cpu for cpu, and nccl for cuda where NCCL is
//                           built and a GPU is visible (else why not, which
//                           a call with a cuda buffer reports)
// "socket", the cpu backend's old name, is read as "cpu" everywhere.
struct BackendSpec {
  std::string text;               // as given
  std::string cpu, cuda;          // backend names; "" when none
  std::string cpu_why, cuda_why;  // why a device type has none
};
// Throws InvalidArgument for malformed strings and unknown names or device
// types (listing the known ones).
BackendSpec parse_backend_spec(const std::string& text);
// "" when every backend the spec names can run here, else why not.
std::string backend_spec_unavailable_reason(const BackendSpec& spec);
// Builds one group with a backend per device type (PerDeviceProcessGroup);
// collective like create_backend.
std::shared_ptr<ProcessGroup> create_process_group(const BackendSpec& spec,
                                                   const BackendContext& context);
// The same for a process that joins a running group (a replacement):
// BackendError when a backend of the spec cannot be joined.
std::shared_ptr<ProcessGroup> join_process_group(const BackendSpec& spec,
                                                 const BackendContext& context);

}  // namespace collie
