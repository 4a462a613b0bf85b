#include "collie/collectives/all_reduce_algorithm.h"

namespace collie {

std::string_view to_string(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto: return "auto";
    case AllReduceAlgorithm::kRing: return "ring";
    case AllReduceAlgorithm::kSmall: return "small";
    case AllReduceAlgorithm::kShm: return "shm";
    case AllReduceAlgorithm::kHierarchical: return "hierarchical";
  }
  return "invalid-algorithm";
}

}  // namespace collie
