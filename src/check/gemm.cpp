// gemm and gemm_batched against the float64 reference.
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class GemmCheck final : public OpCheck {
 public:
  explicit GemmCheck(bool batched) : OpCheck(batched ? gemm_batched_op() : gemm_op()), batched_(batched) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec &c = specs[0], &a = specs[1];
    const bool ta = scalar(scalars, "trans_a") != 0, tb = scalar(scalars, "trans_b") != 0;
    const int r = c.rank();
    reference::gemm(a.dtype(), c.dtype(), d[1].data(), d[2].data(), d[0].data(), batched_ ? c.dim(0) : 1, c.dim(r - 2),
                    c.dim(r - 1), ta ? a.dim(r - 2) : a.dim(r - 1), scalar(scalars, "alpha"), scalar(scalars, "beta"),
                    ta, tb);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    const TensorSpec& a = specs[1];
    const std::int64_t k = scalar(scalars, "trans_a") != 0 ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
    return product_tolerance(out, k, scalar(scalars, "tf32") != 0);
  }

 private:
  bool batched_;
};

}  // namespace

const OpCheck& gemm_check() {
  static const GemmCheck check(false);
  return check;
}
const OpCheck& gemm_batched_check() {
  static const GemmCheck check(true);
  return check;
}

}  // namespace mojo
