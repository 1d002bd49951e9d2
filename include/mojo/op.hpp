// Operators. An op is mostly data (OpInfo: name, signature, dtypes,
// template) plus the code only it can have: validating arguments, deriving
// the template params of a specialization from tensor specs and the target,
// the launch geometry and the kernel arguments. It never compiles, launches
// or allocates; the TMA descriptors the sm_90a GEMM takes as arguments come
// from the device part (tile_tensor_map), which encodes each once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mojo/device.hpp"
#include "mojo/perf_model.hpp"
#include "mojo/target.hpp"
#include "mojo/tensor.hpp"

namespace mojo {

// A scalar argument: stored as a double or an int64, converted by the op.
class Scalar {
 public:
  Scalar(float v) : real_(v), is_int_(false) {}
  Scalar(double v) : real_(v), is_int_(false) {}
  Scalar(int v) : int_(v), is_int_(true) {}
  Scalar(long v) : int_(v), is_int_(true) {}
  Scalar(long long v) : int_(v), is_int_(true) {}
  Scalar(bool v) : int_(v), is_int_(true) {}

  double as_double() const noexcept { return is_int_ ? double(int_) : real_; }
  std::int64_t as_int() const noexcept { return is_int_ ? int_ : std::int64_t(real_); }
  bool is_int() const noexcept { return is_int_; }
  friend bool operator==(const Scalar& a, const Scalar& b) noexcept {
    return a.is_int_ == b.is_int_ && (a.is_int_ ? a.int_ == b.int_ : a.real_ == b.real_);
  }

 private:
  union {
    double real_;
    std::int64_t int_;
  };
  bool is_int_;
};

struct ScalarArg {
  std::string_view name;
  Scalar value;
};

#if defined(__clang__)
#define MOJO_LIFETIMEBOUND [[clang::lifetimebound]]
#else
#define MOJO_LIFETIMEBOUND
#endif

// A view of a list of T that binds to `{a, b, c}`, std::vector and std::span
// alike without copying or allocating. A view, as std::span is: braces in a
// call live as long as the call, but `TensorList l = {a, b};` leaves `l`
// pointing at an array gone at the end of that line. Keep a list in a
// std::vector (or a std::array) and pass that; clang says so (-Wdangling).
template <class T>
class ArgList {
 public:
  ArgList() = default;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"  // a view of the braced list, used within the call
#endif
  ArgList(std::initializer_list<T> list MOJO_LIFETIMEBOUND) : data_(list.begin()), size_(list.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  ArgList(std::span<const T> s) : data_(s.data()), size_(s.size()) {}
  ArgList(const std::vector<T>& v MOJO_LIFETIMEBOUND) : data_(v.data()), size_(v.size()) {}
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  std::size_t size() const noexcept { return size_; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};
using TensorList = ArgList<Tensor>;
using ScalarList = ArgList<ScalarArg>;

// The compile-time parameters of one specialization: a short ordered list of
// named integers (a dtype is stored as its enum value). Fixed capacity, so
// computing them on every launch never allocates.
struct Param {
  std::string_view name;  // a string literal owned by the OpDef
  std::int64_t value = 0;
  bool is_dtype = false;
};

class Params {
 public:
  static constexpr int kCapacity = 20;
  void add(std::string_view name, std::int64_t value);
  void add_dtype(std::string_view name, DType dtype);
  std::int64_t get(std::string_view name) const;  // throws if absent (a bug in the OpDef)
  std::int64_t get_or(std::string_view name, std::int64_t fallback) const noexcept;
  DType dtype(std::string_view name) const { return DType(get(name)); }
  std::span<const Param> items() const noexcept { return {items_.data(), std::size_t(count_)}; }
  // "dtype=bf16 hidden=4096 vec=8"
  std::string str() const;
  friend bool operator==(const Params& a, const Params& b) noexcept;

 private:
  std::array<Param, kCapacity> items_{};
  int count_ = 0;
};

struct LaunchGeometry {
  Dim3 grid, block;
  unsigned dynamic_smem = 0;
  // grid.x counts work tiles that the kernel loops over (grid-stride): the
  // Runtime launches at most one block per SM of its device.
  bool persistent = false;
  // The blocks wait for each other (mojo::sync_blocks): launched cooperatively (LaunchOptions::cooperative),
  // so that the GPU runs them all at once or refuses the launch.
  bool cooperative = false;
};

// The device memory a launch lends its plan's kernels: the Runtime keeps one of each per stream, since the
// kernels of one stream run in order.
struct Workspace {
  DevicePtr scratch = 0;  // OpDef::workspace_bytes() bytes, 256-byte aligned, as the last launch left them
  // OpDef::sync_words() 32-bit words, zero when the launch starts; the plan's kernels leave them zero
  // (mojo::leave_sync_words), so that the next launch needs no kernel of its own to clear them.
  DevicePtr sync = 0;
};

// The kernel's arguments in cuLaunchKernel's form, in a fixed inline buffer.
// pack_args fills the kernel's Args struct (kernel_templates/<op>_args.h) and
// pushes it with push_args, then any TMA descriptor the kernel reads in place.
class KernelArgs {
 public:
  KernelArgs() = default;
  KernelArgs(const KernelArgs&) = delete;  // the pointers point into this object's own storage
  KernelArgs& operator=(const KernelArgs&) = delete;
  template <class T>
  void push(const T& value) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64 && sizeof(T) <= 256);
    used_ = (used_ + alignof(T) - 1) / alignof(T) * alignof(T);
    if (count_ == kMaxArgs || used_ + sizeof(T) > sizeof(storage_)) overflow();
    std::memcpy(storage_ + used_, &value, sizeof(T));
    sizes_[count_] = std::uint8_t(sizeof(T) - 1);
    alignments_[count_] = std::uint8_t(alignof(T));
    pointers_[count_++] = storage_ + used_;
    used_ += sizeof(T);
  }
  // An Args struct field by field, in the kernel's parameter order (its for_each_arg, found by ADL). Each
  // field is taken by value, which drops its __restrict__ (clang will not convert a pointer to it to void*).
  template <class A>
  void push_args(const A& a) {
    for_each_arg(a, [this](auto field) { push(field); });
  }
  void** data() noexcept { return pointers_.data(); }
  // For a launch, which reads the arguments and never writes them.
  void** data() const noexcept { return const_cast<void**>(pointers_.data()); }
  int count() const noexcept { return count_; }
  // Argument i's size and alignment in bytes, to check against the kernel's parameter list.
  std::size_t size(int i) const noexcept { return std::size_t(sizes_[std::size_t(i)]) + 1; }
  std::size_t alignment(int i) const noexcept { return alignments_[std::size_t(i)]; }

 private:
  [[noreturn]] static void overflow();
  static constexpr int kMaxArgs = 32;
  alignas(64) unsigned char storage_[640];  // room for the sm_90a GEMM's: 21 arguments, 3 TMA descriptors of 128 bytes
  std::array<void*, kMaxArgs> pointers_{};
  std::array<std::uint8_t, kMaxArgs> sizes_{}, alignments_{};  // size - 1: a TMA descriptor is 128
  std::size_t used_ = 0;
  int count_ = 0;
};

// A device address as a pointer field of a kernel's Args: opaque (the
// element-type fields, void on the host) or typed (ptr<float>(t)).
template <class T = void>
T* ptr(DevicePtr p) noexcept {
  return reinterpret_cast<T*>(p);
}
template <class T = void>
T* ptr(const Tensor& t) noexcept {
  return ptr<T>(t.data);
}

// Tensor shapes by tensor name, as a user gives them on the command line or in
// a manifest ({"x": [4096, 4096]}).
using ShapeMap = std::map<std::string, std::vector<std::int64_t>, std::less<>>;

struct TensorArgInfo {
  std::string_view name;
  std::string_view role;  // "in", "out", "inout"; "stats": an optional output (layer_norm's mean and rstd)
  std::string_view doc;
  // An input this output may be exactly (the same pointer and layout: written in place over it); every other
  // overlap of a written tensor with another tensor is refused at launch (OpDef::check_memory).
  std::string_view in_place_of = {};
  // An output whose dtype is the dtype given for this input (moe_dispatch's index outputs take ids' i32 or i64),
  // not the one a caller would otherwise allocate it in (the op's float dtype, or i64 for an index).
  std::string_view dtype_of = {};
};
// The place of the tensor called `name` in an op's table, at compile time: an op's code says
// `t[kLogits]` (kLogits = slot(kSampleTensors, "logits")) where it said t[2], and a name the table lacks
// does not compile.
template <std::size_t N>
consteval std::size_t slot(const TensorArgInfo (&tensors)[N], std::string_view name) {
  for (std::size_t i = 0; i < N; ++i)
    if (tensors[i].name == name) return i;
  throw "slot: no tensor of that name in the table";  // evaluated: not a constant expression, a compile error
}

struct ScalarArgInfo {
  std::string_view name;
  double default_value;
  std::string_view doc;
};

// What an op is, as data: its name, signature, dtypes and template, the
// things `mojo-jit describe` shows. Each op file declares one as a constexpr.
struct OpInfo {
  std::string_view name;
  std::string_view summary;
  std::span<const TensorArgInfo> tensors;  // in the order launches give them
  std::span<const ScalarArgInfo> scalars = {};  // none by default
  std::span<const DType> dtypes;
  std::string_view template_file;  // the kernel_templates/ file it instantiates
  // Shapes for specs_from_shapes that make a typical specialization, in the
  // command line's form ("x=32x4096"): documentation, and what tests compile.
  std::string_view example_shapes;
};

// Autotuning (RuntimeOptions::autotune), for the ops that have choices worth timing.
class Tunable {
 public:
  // Params worth timing against the heuristic's `chosen` for these tensors and
  // scalars (which comes first); fewer than two: nothing to tune.
  virtual std::vector<Params> candidates(const Params& chosen, TensorList tensors, ScalarList scalars,
                                         const Target& target) const = 0;
  // The shape bucket a tuning result stands for ("m<=32 n<=4096 k<=4096").
  virtual std::string bucket(TensorList tensors) const = 0;
  // Whether these tensors may be launched several times to time candidates:
  // not when an output is also read (gemm with beta != 0, a residual that is
  // the output), since each launch would change what the next one reads.
  virtual bool safe(TensorList tensors, ScalarList scalars) const = 0;

 protected:
  ~Tunable() = default;
};

class OpDef {
 public:
  explicit OpDef(const OpInfo& info) : info_(info) {}
  virtual ~OpDef() = default;
  OpDef(const OpDef&) = delete;
  OpDef& operator=(const OpDef&) = delete;

  const OpInfo& info() const noexcept { return info_; }
  std::string_view name() const noexcept { return info_.name; }
  std::string_view summary() const noexcept { return info_.summary; }
  std::span<const TensorArgInfo> tensor_args() const noexcept { return info_.tensors; }
  std::span<const ScalarArgInfo> scalar_args() const noexcept { return info_.scalars; }
  std::span<const DType> dtypes() const noexcept { return info_.dtypes; }
  std::string_view template_file() const noexcept { return info_.template_file; }
  std::string_view example_shapes() const noexcept { return info_.example_shapes; }

  // Checks the tensor count and scalar names against the info, then lets the
  // op validate the tensors (in tensor_args() order) and scalars and derive
  // the params for `target`. A tensor whose data is 0 is taken as 16-byte
  // aligned (compiling without memory); pointers are checked by pack_args.
  Params specialize(TensorList tensors, ScalarList scalars, const Target& target) const;
  // Throws InvalidArgumentError where a tensor the op writes shares memory with another tensor, but for an
  // output that is exactly the input its info names in_place_of. Interleaved views (q and k as slices of one
  // qkv) do not share an element. Run before a launch packs its arguments.
  void check_memory(TensorList tensors) const;
  // The kernels a launch runs, in stream order, as each one's params. Most
  // ops run one kernel, the specialization's params; a plan of several
  // (attention split over the keys, then the merge of the parts) gives each
  // step the op's params plus "step", and its entry_macro picks the step's
  // entry point. The plan's kernels are compiled, cached and loaded together
  // as one module.
  virtual std::vector<Params> plan(const Params& params) const { return {params}; }
  // How many times the plan runs in a row for these tensors: a loop over
  // chunks (of rows) that keeps the workspace the size of one chunk. Each
  // run's step params then carry "repeat" (0, 1, ...), which reaches
  // geometry and pack_args but not the kernels (the same ones every run); a
  // step meant for some runs only gives an empty grid on the others.
  virtual std::int64_t repeats(const Params& /*params*/, TensorList /*tensors*/) const { return 1; }
  // Device scratch memory the plan's kernels share (partial results passed
  // from one step to the next), in bytes; 0: none. The Runtime lends it from
  // a buffer per stream that grows to the largest need, so a launch after
  // the first for a shape allocates nothing.
  virtual std::size_t workspace_bytes(const Params& /*params*/, TensorList /*tensors*/) const { return 0; }
  // 32-bit words of memory the blocks of a cooperative step meet at (barriers, arrival counters), zero when a
  // launch starts, and left zero by its kernels (Workspace::sync); 0: none.
  virtual std::size_t sync_words(const Params& /*params*/, TensorList /*tensors*/) const { return 0; }
  // What these shapes need at the least (the roofline's inputs): by default
  // every tensor read once and written once (an in-out one both); ops that
  // gather or scatter rows, and the products and attention, say more.
  virtual IdealCost ideal_cost(TensorList tensors, ScalarList scalars) const;
  // The launch geometry of one step of the plan (`params`: the step's).
  virtual LaunchGeometry geometry(const Params& params, TensorList tensors) const = 0;
  // What each block of that step's grid costs, in launch order (x fastest, then y, then z), in any one unit,
  // where its blocks differ (causal attention's tiles); empty: they cost alike. The performance model hands
  // them to the SMs in that order (in_order_balance).
  virtual std::vector<double> block_work(const Params& /*params*/, TensorList /*tensors*/) const { return {}; }
  // Checks pointers (null, alignment the params assume) and packs the
  // kernel arguments of one step; `workspace`: what workspace_bytes() and
  // sync_words() asked for (a pointer of 0 where they asked for none).
  virtual void pack_args(const Params& params, TensorList tensors, ScalarList scalars, const Workspace& workspace,
                         KernelArgs& args) const = 0;
  // Tensor specs from the shapes a user names on the command line
  // (e.g. {"x": [4096, 4096]}); shapes the op can derive may be left out,
  // index tensors (token ids, positions, slots) are i64.
  virtual std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const = 0;
  // The same, with the shapes that the call's scalars decide (complete_shapes): what the CLI, the Python
  // layers, manifests and the benchmark allocate a call's tensors by.
  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes, ScalarList scalars) const;
  // Adds to `shapes`, where not given, those that the scalars decide (gemm's c where a or b is stored
  // transposed; the fused loss's loss of a row each with reduction 0).
  virtual void complete_shapes(ShapeMap& /*shapes*/, ScalarList /*scalars*/) const {}
  // With debug checks on (RuntimeOptions::debug_checks), the Runtime calls
  // this before a launch: ops that index memory with data (token ids,
  // positions, slots) read those to the host and throw InvalidArgumentError
  // for a value out of range, instead of the kernel skipping it.
  virtual void check_data(TensorList /*tensors*/, ScalarList /*scalars*/, StreamHandle /*stream*/) const {}
  // The most dynamic shared memory a launch of this specialization uses; the
  // Runtime opts the function in at load when it exceeds the default 48 KB.
  virtual unsigned max_dynamic_smem(const Params& /*params*/) const { return 0; }

  // The op's autotuning choices, or null when it has none.
  virtual const Tunable* tuning() const noexcept { return nullptr; }

  // "rms_norm_bf16_hidden_4096_vec_8_threads_256_rows_1": readable in PTX and profiles.
  std::string kernel_name(const Params& params) const;
  // The lines appended to the template that instantiate the kernel: the
  // params as a struct the template reads by name, then the entry macro:
  //   struct K_p { using dtype = mojo::bf16; static constexpr int hidden = 4096, ...; };
  //   MOJO_KERNEL_rms_norm(K, K_p)
  std::string entry_line(const Params& params) const;
  // The template's macro for these params: MOJO_KERNEL_<op>, unless a param
  // picks another entry point (a kernel with another signature).
  virtual std::string entry_macro(const Params& params) const;
  // Value of a scalar argument by name, or its declared default.
  double scalar(ScalarList scalars, std::string_view name) const;
  // The same for one that must be a whole number (a count, a code, an index); InvalidArgumentError otherwise.
  std::int64_t whole_scalar(ScalarList scalars, std::string_view name) const;
  // Throws InvalidArgumentError for a scalar name this op does not declare.
  void check_scalar_names(ScalarList scalars) const;
  // Throws ShapeError naming this op's tensors unless one is called `tensor`.
  void check_tensor_name(std::string_view tensor) const;
  // Throws InvalidArgumentError unless exactly tensor_args().size() tensors are given.
  void check_tensor_count(TensorList tensors) const;

 protected:
  // specialize() past the checks every op shares.
  virtual Params derive_params(TensorList tensors, ScalarList scalars, const Target& target) const = 0;
  // A plan of two kernels: `params` with "step" 0, then with "step" 1 (entry_macro tells them apart).
  static std::vector<Params> two_steps(const Params& params);

 private:
  OpInfo info_;
};

// Parses "NAME=DIMS" items ("x=32x4096", "ids=32"), each naming one of the
// op's tensors; ShapeError with the op's tensor names for anything else.
ShapeMap parse_shapes(const OpDef& op, std::span<const std::string> items);
// The same for one space-separated string, such as OpDef::example_shapes().
ShapeMap parse_shapes(const OpDef& op, std::string_view items);

// Parses a "NAME=NUMBER" scalar ("eps=1e-5"); InvalidArgumentError otherwise.
std::pair<std::string, double> parse_param(std::string_view item);

// "x=1x2 k=3" as command-line options: "--shape x=1x2 --shape k=3".
std::string shapes_as_options(std::string_view items);

// All built-in operators.
std::span<const OpDef* const> all_ops();
// Throws UnknownOpError naming the known ops.
const OpDef& find_op(std::string_view name);

// The C type name a dtype has in the device prelude ("float", "mojo::bf16", ...).
std::string_view device_type_name(DType dtype) noexcept;

}  // namespace mojo
