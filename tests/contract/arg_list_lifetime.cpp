// TensorList and ScalarList are views (include/mojo/op.hpp): a braced list kept in a variable dangles after
// its line. Under clang that is a -Wdangling warning at the user's line; this file compiles clean as written
// and fails with -DDANGLING (tests/CMakeLists.txt, Contract.ArgListKeptPastItsLine*).
#include <vector>

#include "mojo/op.hpp"

int count(mojo::TensorList tensors, mojo::ScalarList scalars) { return int(tensors.size() + scalars.size()); }

int main() {
  mojo::Tensor a, b;
  int n = count({a, b}, {{"eps", 1e-6}});  // braces in the call: alive through it
  const std::vector<mojo::Tensor> kept = {a, b};
  const mojo::TensorList view = kept;  // a view of a vector that outlives it
  n += count(view, {});
#ifdef DANGLING
  const mojo::TensorList gone = {a, b};  // the braced list's array ends with this line
  n += count(gone, {});
  const mojo::ScalarList also_gone = std::vector<mojo::ScalarArg>{{"eps", 1e-6}};
  n += count({}, also_gone);
#endif
  return n == 5 ? 0 : 1;
}
