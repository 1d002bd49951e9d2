// Host-side dtype conversions, bit-exact with the device prelude's (round to
// nearest even, NaN kept quiet), and tensor bytes <-> floats: what the cpu
// device's cvt, data checks and host copies of tensors read and write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mojo/tensor.hpp"

namespace mojo::convert {

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

}  // namespace mojo::convert
