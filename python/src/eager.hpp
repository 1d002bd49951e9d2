// mojo_jit._C.TorchEager: one op's eager call on torch tensors (mojo_jit.torch), from the arguments to the launch in
// C++, so that a call costs what reading the tensors, allocating the outputs and launching cost, and no Python.
//
// It never imports torch: mojo_jit.torch hands it the torch objects it uses (the Tensor type, the strided layout,
// the dtypes, the current-stream function) and a `plan` function, which works out in Python what the first call of
// a signature needs. A signature is the dtypes, shapes, devices and presence of the tensors and the scalars' values;
// its plan is the returned outputs' dtypes and shapes and the runtime that launches. A repeat of a signature reads
// the tensors, allocates the outputs like the first input, and launches: nothing else.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "arrays.hpp"

namespace mojo::python {

class TorchEager {
 public:
  // op: the op's name. args: the schema's tensor arguments in its order (the scalars follow them), the first
  // `required` of them required (the outputs are allocated like the first). returned: the
  // outputs it allocates and returns, in the schema's order. plan(tensors, scalars), both dicts by name: (the
  // returned outputs as [(name, torch dtype, shape or None where absent for these inputs)], the runtime that
  // launches them or None for the default device's, asked each call). torch: {"Tensor", "strided",
  // "current_stream": torch._C._cuda_getCurrentRawStream, "grad_enabled": torch.is_grad_enabled, "dtypes": {torch
  // dtype: "f32", ...}}. runtime(): the default device's runtime.
  TorchEager(const std::string& op, const std::vector<std::string>& args, std::size_t required,
             const std::vector<std::string>& returned, nb::object plan, nb::object runtime, nb::dict torch);

  // The registered op's kernel: the outputs allocated, the launch, the outputs returned (None, one, or a tuple).
  // (A method, not __call__: Python calls a method of a nanobind class without looking the slot up.)
  nb::object call(nb::args args, nb::kwargs kwargs);
  // mojo_jit.torch's fast path: as call(), or NotImplemented where mojo_jit.torch decides: $MOJO_JIT_BACKEND asks for
  // another backend, `auto` would fall back (host tensors, no GPU, no $MOJO_JIT_DEVICE), a tensor requires grad in
  // grad mode (autograd records the call there), or an argument is not what the schema takes (the slow path says
  // what is wrong).
  nb::object fast(nb::args args, nb::kwargs kwargs);
  // Signatures remembered so far.
  std::size_t plans() const { return plans_.size(); }

 private:
  // One returned output: new_empty's arguments on the first input, the dims one by one (torch parses them faster
  // than a tuple), the dtype as a keyword where it is not the first input's.
  struct Output {
    std::vector<nb::object> dims;  // (0,) where absent for these inputs; the tuple () for a rank-0 output
    nb::object dtype;              // None: the first input's
    mojo::TensorSpec spec;         // as the launch sees it (new_empty's tensors are contiguous); rank 0: absent
  };
  struct Plan {
    std::vector<Output> outputs;  // as returned_
    nb::object runtime;           // None: the default device's
  };
  struct KeyHash {
    std::size_t operator()(const std::vector<std::int64_t>& key) const noexcept;
  };
  // One tensor argument as read for a signature and a launch.
  struct Read {
    int dtype = -1;   // index into dtypes_; -1: not a tensor of one of them
    int device = -1;  // the CUDA device's index, -1 on the host
    bool requires_grad = false;
    ArrayView view;
  };

  nb::object run(nb::args args, nb::kwargs kwargs, bool fast);
  // The arguments into slots (the tensor arguments, then the scalars); false, or a TypeError, where they do not fit.
  bool bind(nb::args args, nb::kwargs kwargs, std::vector<PyObject*>& slots, bool fast) const;
  // A torch tensor's dtype, device, shape, strides and address; false where it is no tensor the launch takes.
  bool read(PyObject* obj, Read& r, std::string_view name) const;
  // The Python plan function's answer for these arguments (and the errors it raises, before anything is allocated
  // or launched).
  nb::tuple ask_plan(const std::vector<PyObject*>& slots) const;
  // The plan of a signature: remembered, worked out (and remembered while there is room: else in `unkept`).
  const Plan& plan_for(std::vector<std::int64_t>&& key, const std::vector<PyObject*>& slots, Plan& unkept);

  const mojo::OpDef& op_;
  std::vector<nb::str> slot_names_;  // args, then scalars
  std::size_t tensor_slots_ = 0, required_ = 0;
  std::vector<std::string> scalar_names_;
  std::vector<int> source_;       // per tensor of the op: its slot (>= 0), or -1 - its index among the returned
  std::vector<int> slot_tensor_;  // per tensor slot: the op's tensor it is
  std::vector<std::string> returned_;
  nb::object plan_fn_, runtime_fn_, tensor_type_, strided_, current_stream_, grad_enabled_;
  std::vector<std::pair<nb::object, mojo::DType>> dtypes_;
  std::unordered_map<std::vector<std::int64_t>, Plan, KeyHash> plans_;
};

}  // namespace mojo::python
