#include "collie/nn/tensor.h"

#include "collie/base/str_cat.h"

namespace collie::nn {

size_t shape_numel(const Shape& shape) {
  size_t n = 1;
  for (int64_t d : shape) {
    COLLIE_ARG_CHECK_GE(d, 0, "negative size in shape ", shape_to_string(shape));
    n *= static_cast<size_t>(d);
  }
  return n;
}

std::string shape_to_string(const Shape& shape) { return str_cat("[", join(shape, ", "), "]"); }

}  // namespace collie::nn
