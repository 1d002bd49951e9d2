// Checking one specialization against its op's CPU reference, on the device
// a Runtime launches to (a GPU, or the cpu device anywhere): what
// `mojo-jit run` prints and tests assert.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/op.hpp"
#include "mojo/runtime.hpp"

namespace mojo {

struct CheckReport {
  struct Output {
    std::string name;
    DType dtype = DType::f32;
    std::size_t elements = 0, wrong = 0;  // wrong: outside the tolerance
    // Elements that differ (bit for bit) between two launches whose output
    // (and, on the cpu device, workspace) memory held two poisons: read
    // before written, or never written. Not counted for "inout" tensors.
    std::size_t poison_dependent = 0;
    double max_abs = 0, max_rel = 0;      // |device - reference|, and relative to |reference|
    Tolerance tolerance{};
  };
  std::string kernel;
  std::vector<Output> outputs;  // every tensor the op writes
  double kernel_ms = 0;         // the checked launch, between two events (on the cpu device, emulation time)
  bool pass() const noexcept {
    for (const Output& o : outputs)
      if (o.wrong != 0 || o.poison_dependent != 0) return false;
    return true;
  }
};

// Launches `op` on random inputs (seeded; the op's random_data) with its
// outputs poisoned (0xff: NaN in every float type), and compares every
// tensor it writes with OpDef::reference; then launches it again with zeros
// in its outputs (and its workspace, on the cpu device) on another stream,
// and requires the same bits in every "out" tensor. `specs` are contiguous, in
// tensor_args() order; a rank-0 spec is an absent optional tensor.
CheckReport check_op(Runtime& rt, std::string_view op, std::span<const TensorSpec> specs, ScalarList scalars,
                     std::uint32_t seed = 0);

// The elements of `got` outside `tol` of `want` (host bytes of `dtype`;
// where the reference is not finite, the device must match it exactly);
// the first few are described in `report` when given.
std::size_t mismatches(DType dtype, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                       Tolerance tol, std::vector<std::string>* report = nullptr);

}  // namespace mojo
