// The table of emulated primitives a host-built kernel library calls
// (kernel_templates/mojo_cpu_abi.h); the loader hands it to each library.
#pragma once

#include "../../../kernel_templates/mojo_cpu_abi.h"

namespace mojo::cpu {

const mojo_cpu_api& api_table();

}  // namespace mojo::cpu
