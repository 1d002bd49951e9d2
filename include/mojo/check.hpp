// Checking ops against their CPU references: each op's float64 reference,
// the random inputs it accepts and how far a device result may be from the
// reference (OpCheck), and check_op, which launches one specialization on the
// device a Runtime launches to (a GPU, or the cpu device anywhere) and
// compares: what `mojo-jit run` prints and tests assert.
//
// This is the check library (libmojo_jit_check, src/check/ and
// src/reference/): tests, tools and examples link it; the runtime library
// (libmojo_jit) has none of it, so a serving process carries no reference code.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/op.hpp"
#include "mojo/runtime.hpp"

namespace mojo {

// An element of a device result passes against its reference r when
//   |device - r| <= rtol * |r| + atol * max|reference over the tensor|
// (atol relative to the tensor's scale: softmax outputs are ~1e-6).
struct Tolerance {
  double rtol, atol;
};
// Kernels compute in float and round once to the storage type, the
// reference in double: they may differ by what fp32 sums and the fast
// approximations lose, and by a rounding of the storage type.
Tolerance default_tolerance(DType dtype) noexcept;


// How one op is checked (src/check/<op>.cpp). Host copies of contiguous
// tensors: data[i] holds tensor i's bytes in tensor_args() order (empty for
// an absent optional tensor).
class OpCheck {
 public:
  explicit OpCheck(const OpDef& op) : op_(op) {}
  virtual ~OpCheck() = default;
  OpCheck(const OpCheck&) = delete;
  OpCheck& operator=(const OpCheck&) = delete;

  const OpDef& op() const noexcept { return op_; }
  // Reads the inputs and writes the outputs and in-out tensors with the float64 reference.
  virtual void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> data,
                         ScalarList scalars) const = 0;
  // Random contents for tensor i that the op accepts: values in ±[0.05, 2]
  // (never zero); index tensors in range of the others (ops override: a
  // backward op's forward outputs, such as an lse, are its forward's at the
  // same scalars).
  virtual std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                                std::uint32_t seed) const;
  // How far an output may be from the reference (reductions widen it).
  virtual Tolerance tolerance(DType out, std::span<const TensorSpec> /*specs*/, ScalarList /*scalars*/) const {
    return default_tolerance(out);
  }

 protected:
  // The op's scalar by name, or its declared default.
  double scalar(ScalarList scalars, std::string_view name) const { return op_.scalar(scalars, name); }

 private:
  const OpDef& op_;
};

// The check of a built-in op; UnknownOpError naming the known ops otherwise.
const OpCheck& find_check(std::string_view op);

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
  // Tensors the op wrote where it must not: an "in" tensor's elements, or any tensor's bytes outside its view
  // (a Placement's gaps), in tensor_args() order.
  std::vector<std::string> overwritten;
  double kernel_ms = 0;  // the checked launch, between two events (on the cpu device, emulation time)
  bool pass() const noexcept {
    for (const Output& o : outputs)
      if (o.wrong != 0 || o.poison_dependent != 0) return false;
    return overwritten.empty();
  }
};

// Where check_op puts a tensor in device memory, as torch slices lie:
// `offset` elements past an aligned start (a view whose start is not), and
// `pad` elements after each index of dim 0 (stride(0) grows by pad: q as a
// slice of a fused [tokens, q + k + v] projection, a column of a matrix at
// rank 1). The gaps hold 0xff bytes that the op must leave as they were.
struct Placement {
  std::int64_t offset = 0, pad = 0;
  // An output's only: the index of the input it is written in place over (its memory, placement and first
  // contents; the op must name that input in_place_of, or refuse); -1: memory of its own.
  std::int64_t in_place_of = -1;
};

// How check_op's first launch is made: directly, or captured by name into a
// CUDA graph that is then replayed, so that a specialization's first launch
// (its load, its workspace) happens inside the capture, as it does in a server
// that captures its decode step before it ran it once.
enum class CheckLaunch { direct, graph };

// Launches `op` on random inputs (seeded; OpCheck::random_data) with its
// outputs poisoned (0xff: NaN in every float type), and compares every
// tensor it writes with OpCheck::reference; then launches it again with zeros
// in its outputs (and its workspace, on the cpu device) on another stream,
// and requires the same bits in every "out" tensor. After each launch, every
// "in" tensor must be as it was, and every byte outside a tensor's view too.
// `specs` are contiguous, in tensor_args() order; a rank-0 spec is an absent
// optional tensor. `placements` (empty, or one a tensor) lay the tensors out
// in device memory; the references see them contiguous.
CheckReport check_op(Runtime& rt, std::string_view op, std::span<const TensorSpec> specs, ScalarList scalars,
                     std::uint32_t seed = 0, CheckLaunch first_launch = CheckLaunch::direct,
                     std::span<const Placement> placements = {});

// The elements of `got` outside `tol` of `want` (host bytes of `dtype`;
// where the reference is not finite, the device must match it exactly);
// the first few are described in `report` when given.
std::size_t mismatches(DType dtype, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                       Tolerance tol, std::vector<std::string>* report = nullptr);

}  // namespace mojo
