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

// An activation code plus kGated: a GEMM epilogue that reads each pair of
// adjacent output columns (2j, 2j + 1) as (gate, up) and writes
// act(gate) * up to column j: the gate/up projection and act-and-mul of an
// MLP in one product, from weights whose gate and up rows are interleaved.
inline constexpr int kGated = 16;

}  // namespace mojo
