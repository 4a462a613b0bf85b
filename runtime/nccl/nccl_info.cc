#include "collie/runtime/nccl/nccl_info.h"

#include <nccl.h>

#include "collie/base/str_cat.h"

namespace collie::nccl {

std::string version_string() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return str_cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace collie::nccl
