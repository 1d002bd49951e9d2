// Array arguments as a launch sees them: any DLPack, buffer-protocol or array-interface object, or the torch layer's
// tensors read off their attributes, each as an ArrayView.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "mojo/mojo.hpp"

namespace mojo::python {

namespace nb = nanobind;

// One array argument as the launch sees it.
struct ArrayView {
  mojo::TensorSpec spec;  // rank 0: absent (None)
  std::uintptr_t data = 0;
  bool on_host = true;  // host memory (numpy), else a GPU's
  int device_id = 0;
  bool readonly = false;
};

// A tensor spec from an array's dtype, shape and strides in elements; a ShapeError for a rank past the limit or a
// negative stride. Shape () (a Python scalar array) is one element: rank 0 means absent here.
mojo::TensorSpec spec_of(mojo::DType dtype, const std::vector<std::int64_t>& shape,
                         const std::vector<std::int64_t>& strides, std::string_view name);

// Any array object (None: absent), named `name` in the errors it raises.
ArrayView view_of(nb::handle obj, std::string_view name);

}  // namespace mojo::python
