// What every OpDef shares: params, kernel names and entry lines, scalar lookup.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "mojo/error.hpp"
#include "mojo/op.hpp"

namespace mojo {

void Params::add(std::string_view name, std::int64_t value) {
  if (count_ == kCapacity) throw Error(fmt::format("Params: more than {} params", kCapacity));
  items_[count_++] = Param{name, value, false};
}

void Params::add_dtype(std::string_view name, DType dtype) {
  add(name, static_cast<std::int64_t>(dtype));
  items_[count_ - 1].is_dtype = true;
}

std::int64_t Params::get(std::string_view name) const {
  for (const Param& p : items())
    if (p.name == name) return p.value;
  throw InternalError(fmt::format("no param '{}' in {{{}}}", name, str()));
}

std::int64_t Params::get_or(std::string_view name, std::int64_t fallback) const noexcept {
  for (const Param& p : items())
    if (p.name == name) return p.value;
  return fallback;
}

std::string Params::str() const {
  std::string s;
  for (const Param& p : items()) {
    if (!s.empty()) s += ' ';
    if (p.is_dtype)
      s += fmt::format("{}={}", p.name, dtype_name(DType(p.value)));
    else
      s += fmt::format("{}={}", p.name, p.value);
  }
  return s;
}

bool operator==(const Params& a, const Params& b) noexcept {
  return std::equal(a.items().begin(), a.items().end(), b.items().begin(), b.items().end(),
                    [](const Param& x, const Param& y) {
                      return x.name == y.name && x.value == y.value && x.is_dtype == y.is_dtype;
                    });
}

void KernelArgs::overflow() { throw InternalError("too many kernel arguments for KernelArgs"); }

std::string_view device_type_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return "float";
    case DType::f16:
      return "mojo::f16";
    case DType::bf16:
      return "mojo::bf16";
    case DType::i32:
      return "int";
    case DType::i64:
      return "long long";
    case DType::u8:
      return "unsigned char";
  }
  return "void";
}

std::string OpDef::kernel_name(const Params& params) const {
  std::string s(name());
  for (const Param& p : params.items()) {
    if (p.is_dtype && p.name == "dtype")
      s += fmt::format("_{}", dtype_name(DType(p.value)));
    else if (p.is_dtype)
      s += fmt::format("_{}_{}", p.name, dtype_name(DType(p.value)));
    else
      s += fmt::format("_{}_{}", p.name, p.value < 0 ? fmt::format("m{}", -p.value) : std::to_string(p.value));
  }
  return s;
}

std::string OpDef::entry_macro(const Params&) const { return fmt::format("MOJO_KERNEL_{}", name()); }

std::string OpDef::entry_line(const Params& params) const {
  const std::string kernel = kernel_name(params);
  std::string types, ints;
  for (const Param& p : params.items()) {
    if (p.is_dtype) {
      types += fmt::format(" using {} = {};", p.name, device_type_name(DType(p.value)));
    } else {
      if (p.value < INT32_MIN || p.value > INT32_MAX)
        throw InternalError(fmt::format("{} param {}={} does not fit an int", name(), p.name, p.value));
      ints += fmt::format("{}{} = {}", ints.empty() ? "" : ", ", p.name, p.value);
    }
  }
  if (!ints.empty()) ints = fmt::format(" static constexpr int {};", ints);
  return fmt::format("struct {}_p {{{}{} }};\n{}({}, {}_p)", kernel, types, ints, entry_macro(params), kernel, kernel);
}

std::vector<Params> OpDef::two_steps(const Params& params) {
  Params first = params, second = params;
  first.add("step", 0);
  second.add("step", 1);
  return {first, second};
}

Params OpDef::specialize(TensorList tensors, ScalarList scalars, const Target& target) const {
  check_tensor_count(tensors);
  check_scalar_names(scalars);
  return derive_params(tensors, scalars, target);
}

namespace {

// The bytes a tensor's elements lie between: [begin, end), first to last element's last byte; empty where
// begin == end (an absent tensor, one without elements, or a null pointer: pack_args names that).
struct Span {
  DevicePtr begin = 0, end = 0;
};

Span span(const Tensor& t) {
  const std::size_t bytes = t.spec.extent_bytes();
  if (t.data == 0 || t.spec.rank() == 0 || bytes == 0) return {};
  return {t.data, t.data + bytes};
}

// Where dims 1.. are contiguous, a tensor's elements lie in dim(0) slices of `slice` bytes, `period` bytes
// apart; else period 0.
struct Slices {
  std::uint64_t period = 0, slice = 0;
};

Slices slices(const TensorSpec& s) {
  std::int64_t inner = 1;
  for (int i = s.rank() - 1; i >= 1; --i) {
    if (s.dim(i) != 1 && s.stride(i) != inner) return {};
    inner *= s.dim(i);
  }
  if (s.dim(0) < 2 || s.stride(0) < inner) return {};
  const std::uint64_t size = dtype_size(s.dtype());
  return {std::uint64_t(s.stride(0)) * size, std::uint64_t(inner) * size};
}

// Whether two tensors may share a byte: their spans meet, and they are not slices of the same period whose
// places in it are apart (q and k of one qkv, each token's heads at their own offset).
bool overlap(const Tensor& a, Span sa, const Tensor& b, Span sb) {
  if (sa.end <= sb.begin || sb.end <= sa.begin) return false;  // an empty one too
  const Slices fa = slices(a.spec), fb = slices(b.spec);
  if (fa.period == 0 || fa.period != fb.period) return true;
  const std::uint64_t p = fa.period;  // b's slices start `from` bytes into a's periods
  const std::uint64_t from = sb.begin >= sa.begin ? (sb.begin - sa.begin) % p : (p - (sa.begin - sb.begin) % p) % p;
  return !(fa.slice <= from && from + fb.slice <= p);
}

}  // namespace

void OpDef::check_memory(TensorList tensors) const {
  const std::span<const TensorArgInfo> infos = tensor_args();
  constexpr std::size_t kKept = 16;  // spans found once each (ops have fewer tensors)
  std::array<Span, kKept> kept;
  for (std::size_t i = 0; i < tensors.size() && i < kKept; ++i) kept[i] = span(tensors[i]);
  const auto at = [&](std::size_t i) { return i < kKept ? kept[i] : span(tensors[i]); };
  for (std::size_t w = 0; w < tensors.size(); ++w) {
    if (infos[w].role == "in") continue;
    const Span written = at(w);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (i == w || !overlap(tensors[w], written, tensors[i], at(i))) continue;
      if (infos[w].in_place_of == infos[i].name && tensors[w].data == tensors[i].data &&
          tensors[w].spec == tensors[i].spec)
        continue;
      throw InvalidArgumentError(
          fmt::format("{}: {} and {} share memory; give {} memory of its own{}", name(), infos[w].name, infos[i].name,
                      infos[w].name,
                      infos[w].in_place_of.empty()
                          ? ""
                          : fmt::format(" (or exactly {}'s, to write it in place)", infos[w].in_place_of)));
    }
  }
}

IdealCost OpDef::ideal_cost(TensorList tensors, ScalarList /*scalars*/) const {
  IdealCost c;
  for (std::size_t i = 0; i < tensors.size() && i < tensor_args().size(); ++i)
    if (tensors[i].spec.rank() != 0)
      c.bytes += (tensor_args()[i].role == "inout" ? 2.0 : 1.0) * double(tensors[i].spec.nbytes());
  return c;
}

std::vector<TensorSpec> OpDef::specs_from_shapes(DType dtype, const ShapeMap& shapes, ScalarList scalars) const {
  ShapeMap completed = shapes;
  complete_shapes(completed, scalars);
  return specs_from_shapes(dtype, completed);
}

double OpDef::scalar(ScalarList scalars, std::string_view name) const {
  for (const ScalarArg& s : scalars)
    if (s.name == name) return s.value.as_double();
  for (const ScalarArgInfo& info : scalar_args())
    if (info.name == name) return info.default_value;
  throw InternalError(fmt::format("{} has no scalar '{}'", this->name(), name));
}

std::int64_t OpDef::whole_scalar(ScalarList scalars, std::string_view name) const {
  const double v = scalar(scalars, name);
  if (v != std::floor(v) || std::abs(v) > 1e15)  // NaN fails the first test
    throw InvalidArgumentError(fmt::format("{}: {} is {}; expected a whole number", this->name(), name, v));
  return std::int64_t(v);
}

void OpDef::check_scalar_names(ScalarList scalars) const {
  for (const ScalarArg& s : scalars) {
    auto args = scalar_args();
    bool known = std::any_of(args.begin(), args.end(), [&](const ScalarArgInfo& i) { return i.name == s.name; });
    if (!known) {
      std::vector<std::string_view> names;
      for (const ScalarArgInfo& i : args) names.push_back(i.name);
      throw InvalidArgumentError(fmt::format("{}: unknown scalar '{}'; it takes: {}", name(), s.name,
                                             names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
    }
  }
}

void OpDef::check_tensor_name(std::string_view tensor) const {
  auto args = tensor_args();
  if (std::any_of(args.begin(), args.end(), [&](const TensorArgInfo& a) { return a.name == tensor; })) return;
  std::vector<std::string_view> names;
  for (const TensorArgInfo& a : args) names.push_back(a.name);
  throw ShapeError(fmt::format("{} has no tensor '{}'; its tensors: {}", name(), tensor, fmt::join(names, ", ")));
}

void OpDef::check_tensor_count(TensorList tensors) const {
  auto args = tensor_args();
  if (tensors.size() != args.size()) {
    std::vector<std::string_view> names;
    for (const TensorArgInfo& a : args) names.push_back(a.name);
    throw InvalidArgumentError(
        fmt::format("{} takes {} tensors ({}), got {}", name(), args.size(), fmt::join(names, ", "), tensors.size()));
  }
}

ShapeMap parse_shapes(const OpDef& op, std::span<const std::string> items) {
  ShapeMap named;
  for (const std::string& s : items) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
      throw ShapeError(fmt::format("bad --shape '{}': expected NAME=DIMS, e.g. x=4096x4096", s));
    std::string name = s.substr(0, eq);
    op.check_tensor_name(name);
    std::vector<std::int64_t> dims;
    const std::string text = s.substr(eq + 1);
    if (text.back() == 'x')  // getline would drop the empty last dim
      throw ShapeError(fmt::format("bad --shape '{}': '' is not a dimension; expected e.g. x=4096x4096", s));
    std::stringstream in(text);
    for (std::string dim; std::getline(in, dim, 'x');) {
      std::size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(dim, &used);
      } catch (const std::exception&) {
      }
      if (used != dim.size() || v < 0)
        throw ShapeError(fmt::format("bad --shape '{}': '{}' is not a dimension; expected e.g. x=4096x4096", s, dim));
      dims.push_back(v);
    }
    if (auto it = named.find(name); it != named.end() && it->second != dims)
      throw ShapeError(fmt::format("--shape {} given twice, as {} and {}", name, fmt::join(it->second, "x"),
                                   fmt::join(dims, "x")));
    named[name] = dims;
  }
  return named;
}

std::string shapes_as_options(std::string_view items) {
  std::string out;
  std::stringstream in{std::string(items)};
  for (std::string item; in >> item;) out += fmt::format("{}--shape {}", out.empty() ? "" : " ", item);
  return out;
}

std::pair<std::string, double> parse_param(std::string_view item) {
  const std::string text(item);
  const auto eq = text.find('=');
  double value = 0;
  std::size_t used = 0;
  try {
    if (eq != std::string::npos) value = std::stod(text.substr(eq + 1), &used);
  } catch (const std::exception&) {
  }
  if (eq == std::string::npos || eq == 0 || used == 0 || used != text.size() - eq - 1)
    throw InvalidArgumentError(fmt::format("bad --param '{}': expected NAME=NUMBER, e.g. eps=1e-5", text));
  return {text.substr(0, eq), value};
}

ShapeMap parse_shapes(const OpDef& op, std::string_view items) {
  std::vector<std::string> list;
  std::stringstream in{std::string(items)};
  for (std::string item; in >> item;) list.push_back(item);
  return parse_shapes(op, list);
}

}  // namespace mojo
