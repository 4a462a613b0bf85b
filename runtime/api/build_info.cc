#include "collie/runtime/api/build_info.h"

#include "collie/base/config.h"
#include "collie/base/str_cat.h"
#if COLLIE_HAVE_NCCL
#include "collie/runtime/nccl/nccl_info.h"
#endif

namespace collie {

bool built_with_nccl() { return COLLIE_HAVE_NCCL; }
bool built_with_cuda() { return COLLIE_HAVE_CUDA; }

std::string build_info() {
  std::string info = str_cat("collie ", COLLIE_VERSION_STRING);
#if COLLIE_HAVE_NCCL
  info += str_cat(" (nccl ", nccl::version_string(), ", cuda)");
#elif COLLIE_HAVE_CUDA
  info += " (cuda, no nccl)";
#else
  info += " (cpu only)";
#endif
  return info;
}

}  // namespace collie
