// The activation codes, one list for both sides: the ops' params and the
// references include this file on the host, mojo::activate (mojo_prelude.cuh)
// on the device. Params carry a code as its int.
#pragma once

namespace mojo {

enum class Act : int {
  none = 0,       // identity (a linear without activation)
  gelu = 1,       // x/2 (1 + erf(x / sqrt 2))
  gelu_tanh = 2,  // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  silu = 3,       // x / (1 + e^-x)
};

}  // namespace mojo
