// Host-side dtype conversions, bit-exact with the device prelude's (round to
// nearest even, NaN kept quiet), and tensor bytes <-> floats.
#include "core/convert.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::convert {

std::uint16_t float_to_bf16(float v) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_float(std::uint16_t bits) noexcept { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

std::uint16_t float_to_f16(float v) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  std::uint32_t sign = (u >> 16) & 0x8000u;
  std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);     // NaN
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);    // rounds to inf
  if (abs < 0x38800000u) {                                          // subnormal half (or zero)
    // value = abs_float; half subnormal unit is 2^-24: round(value * 2^24) to even.
    float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // exact: power-of-two scale
    return std::uint16_t(sign | std::uint32_t(std::nearbyint(scaled)));
  }
  std::uint32_t mant = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias exponent (-112 << 23) and round
  return std::uint16_t(sign | (mant >> 13));
}

float f16_to_float(std::uint16_t bits) noexcept {
  std::uint32_t sign = std::uint32_t(bits & 0x8000u) << 16;
  std::uint32_t exp = (bits >> 10) & 0x1fu;
  std::uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float f = float(mant) * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

float load(DType dtype, const void* data, std::size_t i) noexcept {
  auto bytes = static_cast<const std::uint8_t*>(data);
  switch (dtype) {
    case DType::f32: { float v; std::memcpy(&v, bytes + 4 * i, 4); return v; }
    case DType::f16: { std::uint16_t b; std::memcpy(&b, bytes + 2 * i, 2); return f16_to_float(b); }
    case DType::bf16: { std::uint16_t b; std::memcpy(&b, bytes + 2 * i, 2); return bf16_to_float(b); }
    case DType::i32: { std::int32_t v; std::memcpy(&v, bytes + 4 * i, 4); return float(v); }
    case DType::i64: { std::int64_t v; std::memcpy(&v, bytes + 8 * i, 8); return float(v); }
    case DType::u8: return float(bytes[i]);
  }
  return 0;
}

void store(DType dtype, void* data, std::size_t i, float v) noexcept {
  auto bytes = static_cast<std::uint8_t*>(data);
  switch (dtype) {
    case DType::f32: std::memcpy(bytes + 4 * i, &v, 4); return;
    case DType::f16: { std::uint16_t b = float_to_f16(v); std::memcpy(bytes + 2 * i, &b, 2); return; }
    case DType::bf16: { std::uint16_t b = float_to_bf16(v); std::memcpy(bytes + 2 * i, &b, 2); return; }
    case DType::i32: { std::int32_t x = std::int32_t(v); std::memcpy(bytes + 4 * i, &x, 4); return; }
    case DType::i64: { std::int64_t x = std::int64_t(v); std::memcpy(bytes + 8 * i, &x, 8); return; }
    case DType::u8: bytes[i] = std::uint8_t(v); return;
  }
}

std::vector<std::uint8_t> encode(DType dtype, const std::vector<float>& values) {
  std::vector<std::uint8_t> out(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) store(dtype, out.data(), i, values[i]);
  return out;
}

std::vector<float> decode(DType dtype, const std::vector<std::uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = load(dtype, bytes.data(), i);
  return out;
}

}  // namespace mojo::convert
