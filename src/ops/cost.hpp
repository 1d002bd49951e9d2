// Helpers for OpDef::ideal_cost: a tensor's bytes, and those of some of its rows.
#pragma once

#include <algorithm>

#include "mojo/op.hpp"

namespace mojo::cost {

inline double bytes(const Tensor& t) { return t.spec.rank() == 0 ? 0 : double(t.spec.nbytes()); }
// `rows` indices of t's first dim, at most all of them.
inline double rows(const Tensor& t, double rows) {
  if (t.spec.rank() == 0 || t.spec.dim(0) == 0) return 0;
  const double all = double(t.spec.dim(0));
  return std::min(rows, all) * bytes(t) / all;
}
// `c` with tensor `t` counted as `now` bytes instead of what the default counted (`was`).
inline void recount(IdealCost& c, double was, double now) { c.bytes += now - was; }

}  // namespace mojo::cost
