// The templates compiled into the library (generated from kernel_templates/).
#pragma once

#include <span>
#include <string_view>

namespace mojo::embedded {

struct Template {
  std::string_view name;  // "rms_norm.cu"
  std::string_view text;
};

std::span<const Template> templates();

}  // namespace mojo::embedded
