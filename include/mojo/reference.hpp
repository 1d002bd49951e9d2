// CPU references for every op, in plain C++ with float64 accumulation, and
// the host-side dtype conversions tests and examples need to fill and read
// device buffers. Tensors here are host byte buffers of the op's dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mojo/tensor.hpp"

namespace mojo::reference {

// IEEE round-to-nearest-even conversions, identical to the device's cvt.rn.
std::uint16_t float_to_bf16(float v) noexcept;
float bf16_to_float(std::uint16_t bits) noexcept;
std::uint16_t float_to_f16(float v) noexcept;
float f16_to_float(std::uint16_t bits) noexcept;

// Element i of a host buffer of `dtype` as float, and back (rounded to dtype).
float load(DType dtype, const void* data, std::size_t i) noexcept;
void store(DType dtype, void* data, std::size_t i, float v) noexcept;
// `count` values converted to a host buffer of dtype.
std::vector<std::uint8_t> encode(DType dtype, const std::vector<float>& values);
std::vector<float> decode(DType dtype, const std::vector<std::uint8_t>& bytes);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, float64 inside,
// rounded once to dtype.
void rms_norm(DType dtype, const void* x, const void* weight, void* out, std::int64_t rows,
              std::int64_t hidden, double eps);

}  // namespace mojo::reference
