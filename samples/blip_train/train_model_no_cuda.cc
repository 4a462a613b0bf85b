// --device cuda in a build without CUDA: refused, saying why.
#include "collie/base/error.h"
#include "collie/samples/blip_train/train_model.h"

namespace collie::samples {

std::string cuda_unavailable_reason() {
  return "collie was built without CUDA (COLLIE_HAVE_CUDA=0), so the CUDA model is not compiled "
         "in; rebuild "
         "with the CUDA toolkit (COLLIE_WITH_CUDA=AUTO or ON) or use --device cpu";
}

std::unique_ptr<TrainModel> make_cuda_train_model(nn::Sequential&, nn::AdamW&,
                                                  const nn::AdamWOptions&, int) {
  throw BackendError("--device cuda: " + cuda_unavailable_reason());
}

}  // namespace collie::samples
