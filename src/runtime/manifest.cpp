#include "mojo/manifest.hpp"

#include <fmt/format.h>

#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "mojo/error.hpp"

namespace mojo {

namespace {

// Views into `scalars`.
std::vector<ScalarArg> args_of(const std::vector<std::pair<std::string, double>>& scalars) {
  std::vector<ScalarArg> out;
  for (const auto& [name, value] : scalars) out.push_back({name, Scalar(value)});
  return out;
}

[[noreturn]] void fail(std::string_view source, const toml::node* node, const std::string& what) {
  if (node && node->source().begin.line > 0)
    throw InvalidArgumentError(fmt::format("{}:{}: {}", source, node->source().begin.line, what));
  throw InvalidArgumentError(fmt::format("{}: {}", source, what));
}

std::int64_t to_dim(std::string_view source, const toml::node& n) {
  // Only an integer node: toml++ converts a float to int64 without a range check (UB, found by fuzz_manifest).
  auto v = n.is_integer() ? n.value<std::int64_t>() : std::nullopt;
  if (!v || *v < 0) fail(source, &n, "a dimension must be a non-negative integer");
  return *v;
}

std::vector<std::string> strings(std::string_view source, const toml::node* n, std::string_view key) {
  std::vector<std::string> out;
  const toml::array* arr = n ? n->as_array() : nullptr;
  if (!arr) fail(source, n, fmt::format("'{}' must be an array of strings", key));
  for (const toml::node& e : *arr) {
    auto s = e.value<std::string>();
    if (!s) fail(source, &e, fmt::format("'{}' must be an array of strings", key));
    out.push_back(*s);
  }
  return out;
}

// One [[kernel]] entry: its op, dtypes, shapes (a dim may be a bucket of choices) and params.
Manifest::Kernel kernel_of(std::string_view source, const toml::node& kn) {
  const toml::table* kt = kn.as_table();
  if (!kt) fail(source, &kn, "each [[kernel]] must be a table");
  Manifest::Kernel k;
  for (auto&& [key, node] : *kt)
    if (key != "op" && key != "dtypes" && key != "shapes" && key != "params")
      fail(source, &node,
           fmt::format("unknown key '{}' in [[kernel]] (expected op, dtypes, shapes, params)", key.str()));
  auto op = (*kt)["op"].value<std::string>();
  if (!op) fail(source, &kn, "[[kernel]] needs op = \"<name>\"");
  try {
    find_op(*op);
  } catch (const UnknownOpError& e) {
    fail(source, kt->get("op"), e.what());
  }
  k.op = *op;
  for (const std::string& d : strings(source, kt->get("dtypes"), "dtypes")) {
    try {
      k.dtypes.push_back(parse_dtype(d));
    } catch (const DTypeError& e) {
      fail(source, kt->get("dtypes"), e.what());
    }
  }
  const toml::array* shapes = (*kt)["shapes"].as_array();
  if (!shapes || shapes->empty()) fail(source, &kn, "[[kernel]] needs shapes = [{ x = [rows, hidden] }, ...]");
  for (const toml::node& sn : *shapes) {
    const toml::table* st = sn.as_table();
    if (!st) fail(source, &sn, "each shape is a table such as { x = [1, 4096] }");
    auto& shape = k.shapes.emplace_back();
    for (auto&& [name, dims_node] : *st) {
      const toml::array* dims = dims_node.as_array();
      if (!dims) fail(source, &dims_node, fmt::format("shape of '{}' must be an array of dimensions", name.str()));
      auto& out = shape[std::string(name.str())];
      for (const toml::node& d : *dims) {
        std::vector<std::int64_t> choices;
        if (const toml::array* bucket = d.as_array()) {
          for (const toml::node& b : *bucket) choices.push_back(to_dim(source, b));
          if (choices.empty()) fail(source, &d, "an empty bucket of dimensions");
        } else {
          choices.push_back(to_dim(source, d));
        }
        out.push_back(std::move(choices));
      }
    }
  }
  if (const toml::table* params = (*kt)["params"].as_table())
    for (auto&& [name, value] : *params) {
      auto v = value.value<double>();
      if (!v) fail(source, &value, fmt::format("param '{}' must be a number", name.str()));
      k.scalars.emplace_back(std::string(name.str()), *v);
    }
  return k;
}

}  // namespace

std::vector<ScalarArg> PrewarmItem::scalar_args() const { return args_of(scalars); }

Manifest Manifest::parse(std::string_view text, std::string_view source) {
  // Manifests are ASCII. Besides being all they need, this keeps input away
  // from toml++ 3.3's Unicode whitespace table, which reaches
  // __builtin_unreachable on some code points (found by tests/fuzz).
  int line = 1;
  for (unsigned char c : text) {
    if (c == '\n') ++line;
    if (c >= 0x80 || (c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f)
      throw InvalidArgumentError(fmt::format("{}:{}: byte {:#04x} is not printable ASCII; manifests are ASCII text",
                                             source, line, c));
  }
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw InvalidArgumentError(fmt::format("{}:{}: {}", source, e.source().begin.line, e.description()));
  }
  Manifest m;
  for (auto&& [key, node] : root) {
    if (key != "name" && key != "targets" && key != "kernel")
      fail(source, &node, fmt::format("unknown key '{}' (expected name, targets, [[kernel]])", key.str()));
  }
  if (auto n = root["name"].value<std::string>()) m.name = *n;
  if (root.contains("targets"))
    for (const std::string& t : strings(source, root.get("targets"), "targets")) {
      try {
        m.targets.push_back(Target::parse(t));
      } catch (const ArchError& e) {
        fail(source, root.get("targets"), e.what());
      }
    }
  const toml::array* kernels = root["kernel"].as_array();
  if (!kernels || kernels->empty()) fail(source, nullptr, "no [[kernel]] entries");
  for (const toml::node& kn : *kernels) m.kernels.push_back(kernel_of(source, kn));
  return m;
}

Manifest Manifest::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgumentError(fmt::format("cannot read manifest {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path.string());
}

Manifest Manifest::examples(const std::vector<std::string>& ops) {
  std::vector<const OpDef*> chosen;
  if (ops.empty()) chosen.assign(all_ops().begin(), all_ops().end());
  for (const std::string& name : ops) chosen.push_back(&find_op(name));
  Manifest m;
  m.name = "examples";
  for (const OpDef* op : chosen) {
    Kernel k{std::string(op->name()), {op->dtypes().begin(), op->dtypes().end()}, {{}}, {}};
    for (const auto& [tensor, dims] : parse_shapes(*op, op->example_shapes())) {
      auto& choices = k.shapes[0][tensor];  // one choice per dim: no buckets
      for (std::int64_t d : dims) choices.push_back({d});
    }
    m.kernels.push_back(std::move(k));
  }
  return m;
}

std::vector<PrewarmItem> Manifest::items(const std::vector<Target>& requested) const {
  const std::vector<Target>& targets = requested.empty() ? this->targets : requested;
  if (targets.empty()) throw InvalidArgumentError("no targets: give --arch (e.g. sm_80,sm_90) or targets = [...] in the manifest");
  std::vector<PrewarmItem> out;
  for (const Kernel& k : kernels) {
    const OpDef& op = find_op(k.op);
    for (const auto& shape : k.shapes)
      for (const auto& entry : shape) {
        try {
          op.check_tensor_name(entry.first);
        } catch (const ShapeError& e) {
          throw InvalidArgumentError(fmt::format("manifest: {}", e.what()));
        }
      }
    for (DType dtype : k.dtypes)
      for (const auto& shape : k.shapes) {
        // Expand buckets: every combination of the listed dims, tensor by tensor.
        std::vector<ShapeMap> concrete(1);
        for (const auto& [name, dims] : shape)
          for (const auto& choices : dims) {
            std::vector<ShapeMap> next;
            for (const auto& partial : concrete)
              for (std::int64_t d : choices) {
                auto c = partial;
                c[name].push_back(d);
                next.push_back(std::move(c));
              }
            concrete = std::move(next);
          }
        for (const auto& named : concrete) {
          std::vector<std::string> parts;
          for (const auto& [name, dims] : named) parts.push_back(fmt::format("{}={}", name, fmt::join(dims, "x")));
          const std::vector<ScalarArg> scalars = args_of(k.scalars);
          std::vector<Tensor> tensors;
          for (const TensorSpec& s : op.specs_from_shapes(dtype, named, scalars)) tensors.push_back({s, 0});
          for (const Target& t : targets) {
            PrewarmItem item{k.op, tensors, k.scalars, t,
                             fmt::format("{} {} {} {}", k.op, dtype_name(dtype), fmt::join(parts, " "), t.sm_name())};
            try {
              op.specialize(item.tensors, scalars, t);  // reject what the op rejects, now
            } catch (const Error& e) {
              throw InvalidArgumentError(fmt::format("manifest entry {}: {}", item.label, e.what()));
            }
            out.push_back(std::move(item));
          }
        }
      }
  }
  return out;
}

}  // namespace mojo
