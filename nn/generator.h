// Generator: the random source of initialisation and dropout, the same
// algorithm as torch's CPU generator so that collie and a PyTorch program
// with the same seed draw the same numbers.
//
// torch's CPUGeneratorImpl is an MT19937 seeded with the low 32 bits of the
// 64-bit seed (standard init_genrand); random() is one 32-bit output. That is
// exactly std::mt19937, so we use it. uniform(from, to) follows torch's
// float path: the low 24 bits of one output scaled by 2^-24, then
// x * (to - from) + from in float, rounded once (fused). The tests compare both against torch.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace collie::nn {

class Generator {
 public:
  explicit Generator(uint64_t seed = 5489) { manual_seed(seed); }

  void manual_seed(uint64_t seed) { engine_.seed(static_cast<uint32_t>(seed)); }
  uint32_t random() { return static_cast<uint32_t>(engine_()); }
  // torch's random64(): two outputs, the first one the high half.
  uint64_t random64() {
    uint64_t hi = random();
    uint64_t lo = random();
    return (hi << 32) | lo;
  }
  // One float in [from, to), as torch's Tensor.uniform_ draws it.
  float uniform(float from, float to) {
    float x =
        static_cast<float>(random() & ((1u << 24) - 1)) * (1.0f / static_cast<float>(1u << 24));
    // torch's kernel is built with FMA contraction on x86-64 (AVX2), so its
    // x * (to - from) + from rounds once; std::fma reproduces that bit for bit.
    return std::fma(x, to - from, from);
  }

 private:
  std::mt19937 engine_;
};

}  // namespace collie::nn
