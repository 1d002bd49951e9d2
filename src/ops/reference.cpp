#include "mojo/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

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

void rms_norm(DType dtype, const void* x, const void* weight, void* out, std::int64_t rows,
              std::int64_t hidden, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (std::int64_t c = 0; c < hidden; ++c) {
      double v = load(dtype, x, std::size_t(r * hidden + c));
      sum_sq += v * v;
    }
    double scale = 1.0 / std::sqrt(sum_sq / double(hidden) + eps);
    for (std::int64_t c = 0; c < hidden; ++c) {
      double v = load(dtype, x, std::size_t(r * hidden + c)) * scale * load(dtype, weight, std::size_t(c));
      store(dtype, out, std::size_t(r * hidden + c), float(v));
    }
  }
}

void add_rms_norm(DType dtype, void* residual, const void* x, const void* weight, void* out, std::int64_t rows,
                  std::int64_t hidden, double eps) {
  const std::size_t n = std::size_t(rows * hidden);
  for (std::size_t i = 0; i < n; ++i) store(dtype, residual, i, load(dtype, residual, i) + load(dtype, x, i));
  rms_norm(dtype, residual, weight, out, rows, hidden, eps);
}

void layer_norm(DType dtype, const void* x, const void* weight, const void* bias, void* out, float* mean,
                float* rstd, std::int64_t rows, std::int64_t hidden, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * hidden);
    double sum = 0;
    for (std::int64_t c = 0; c < hidden; ++c) sum += load(dtype, x, base + std::size_t(c));
    const double mu = sum / double(hidden);
    double var = 0;
    for (std::int64_t c = 0; c < hidden; ++c) {
      const double d = load(dtype, x, base + std::size_t(c)) - mu;
      var += d * d;
    }
    const double rs = 1.0 / std::sqrt(var / double(hidden) + eps);
    if (mean != nullptr) mean[r] = float(mu);
    if (rstd != nullptr) rstd[r] = float(rs);
    for (std::int64_t c = 0; c < hidden; ++c) {
      const double v = (load(dtype, x, base + std::size_t(c)) - mu) * rs * load(dtype, weight, std::size_t(c)) +
                       load(dtype, bias, std::size_t(c));
      store(dtype, out, base + std::size_t(c), float(v));
    }
  }
}

void layer_norm_backward(DType dtype, const void* grad_out, const void* x, const void* weight, const float* mean,
                         const float* rstd, void* grad_x, void* grad_weight, void* grad_bias, std::int64_t rows,
                         std::int64_t hidden) {
  std::vector<double> dw(std::size_t(hidden), 0.0), db(std::size_t(hidden), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * hidden);
    double sum_g = 0, sum_gx = 0;
    for (std::int64_t c = 0; c < hidden; ++c) {
      const std::size_t i = base + std::size_t(c);
      const double dy = load(dtype, grad_out, i), xhat = (load(dtype, x, i) - mean[r]) * double(rstd[r]);
      const double g = dy * load(dtype, weight, std::size_t(c));
      sum_g += g;
      sum_gx += g * xhat;
      dw[std::size_t(c)] += dy * xhat;
      db[std::size_t(c)] += dy;
    }
    sum_g /= double(hidden);
    sum_gx /= double(hidden);
    for (std::int64_t c = 0; c < hidden; ++c) {
      const std::size_t i = base + std::size_t(c);
      const double xhat = (load(dtype, x, i) - mean[r]) * double(rstd[r]);
      const double g = load(dtype, grad_out, i) * load(dtype, weight, std::size_t(c));
      store(dtype, grad_x, i, float(double(rstd[r]) * (g - sum_g - xhat * sum_gx)));
    }
  }
  for (std::int64_t c = 0; c < hidden; ++c) {
    store(dtype, grad_weight, std::size_t(c), float(dw[std::size_t(c)]));
    store(dtype, grad_bias, std::size_t(c), float(db[std::size_t(c)]));
  }
}

void softmax(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols, bool log) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * cols);
    double max = -INFINITY;
    for (std::int64_t c = 0; c < cols; ++c) max = std::max(max, double(load(dtype, x, base + std::size_t(c))));
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(load(dtype, x, base + std::size_t(c)) - max);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double d = load(dtype, x, base + std::size_t(c)) - max;
      store(dtype, out, base + std::size_t(c), float(log ? d - std::log(sum) : std::exp(d) / sum));
    }
  }
}

void softmax_backward(DType dtype, const void* grad_out, const void* out, void* grad_x, std::int64_t rows,
                      std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * cols);
    double dot = 0;
    for (std::int64_t c = 0; c < cols; ++c)
      dot += double(load(dtype, grad_out, base + std::size_t(c))) * load(dtype, out, base + std::size_t(c));
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = base + std::size_t(c);
      store(dtype, grad_x, i, float(load(dtype, out, i) * (double(load(dtype, grad_out, i)) - dot)));
    }
  }
}

double activate(Activation act, double x) {
  switch (act) {
    case Activation::silu: return x / (1.0 + std::exp(-x));
    case Activation::gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::gelu_tanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return 0;
}

void activation(DType dtype, Activation act, bool gated, const void* x, void* out, std::int64_t n, std::int64_t d) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!gated) {
      store(dtype, out, std::size_t(i), float(activate(act, load(dtype, x, std::size_t(i)))));
      continue;
    }
    const std::int64_t row = i / d, c = i % d;
    const double a = load(dtype, x, std::size_t(row * 2 * d + c)), b = load(dtype, x, std::size_t(row * 2 * d + d + c));
    store(dtype, out, std::size_t(i), float(activate(act, a) * b));
  }
}

void rotary_embedding(DType dtype, void* q, void* k, const std::int64_t* positions, const float* cos_sin,
                      std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                      std::int64_t rot_dim, std::int64_t max_pos, bool neox) {
  const std::int64_t half = rot_dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t pos = positions[t];
    if (pos < 0 || pos >= max_pos) continue;
    for (std::int64_t h = 0; h < heads + kv_heads; ++h) {
      void* data = h < heads ? q : k;
      const std::int64_t base = h < heads ? (t * heads + h) * head_dim : (t * kv_heads + h - heads) * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const std::size_t i1 = std::size_t(base + (neox ? i : 2 * i)), i2 = std::size_t(base + (neox ? i + half : 2 * i + 1));
        const double c = cos_sin[pos * rot_dim + i], s = cos_sin[pos * rot_dim + half + i];
        const double x1 = load(dtype, data, i1), x2 = load(dtype, data, i2);
        store(dtype, data, i1, float(x1 * c - x2 * s));
        store(dtype, data, i2, float(x2 * c + x1 * s));
      }
    }
  }
}

void embedding(DType dtype, const std::int64_t* ids, const void* weight, void* out, std::int64_t tokens,
               std::int64_t vocab, std::int64_t hidden) {
  const std::size_t row_bytes = std::size_t(hidden) * dtype_size(dtype);
  for (std::int64_t t = 0; t < tokens; ++t) {
    auto* dst = static_cast<std::uint8_t*>(out) + std::size_t(t) * row_bytes;
    if (ids[t] < 0 || ids[t] >= vocab)
      std::memset(dst, 0, row_bytes);
    else
      std::memcpy(dst, static_cast<const std::uint8_t*>(weight) + std::size_t(ids[t]) * row_bytes, row_bytes);
  }
}

void store_kv_cache(DType dtype, const void* k, const void* v, const std::int64_t* slots, void* k_cache,
                    void* v_cache, std::int64_t tokens, std::int64_t num_slots, std::int64_t row) {
  const std::size_t row_bytes = std::size_t(row) * dtype_size(dtype);
  for (std::int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0 || slots[t] >= num_slots) continue;
    const std::size_t at = std::size_t(slots[t]) * row_bytes, from = std::size_t(t) * row_bytes;
    std::memcpy(static_cast<std::uint8_t*>(k_cache) + at, static_cast<const std::uint8_t*>(k) + from, row_bytes);
    std::memcpy(static_cast<std::uint8_t*>(v_cache) + at, static_cast<const std::uint8_t*>(v) + from, row_bytes);
  }
}

void gemm(DType in, DType out, const void* a, const void* b, void* c, std::int64_t batch, std::int64_t m,
          std::int64_t n, std::int64_t k, double alpha, double beta, bool trans_a, bool trans_b) {
  for (std::int64_t p = 0; p < batch; ++p) {
    const std::size_t ab = std::size_t(p * m * k), bb = std::size_t(p * k * n), cb = std::size_t(p * m * n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          const std::size_t ai = ab + std::size_t(trans_a ? q * m + i : i * k + q);
          const std::size_t bi = bb + std::size_t(trans_b ? j * k + q : q * n + j);
          sum += double(load(in, a, ai)) * load(in, b, bi);
        }
        const std::size_t ci = cb + std::size_t(i * n + j);
        const double old = beta != 0 ? beta * load(out, c, ci) : 0.0;
        store(out, c, ci, float(alpha * sum + old));
      }
  }
}

void linear(DType dtype, const void* x, const void* w, const void* bias, const void* residual, void* out,
            std::int64_t m, std::int64_t n, std::int64_t k, int act) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double v = 0;
      for (std::int64_t q = 0; q < k; ++q)
        v += double(load(dtype, x, std::size_t(i * k + q))) * load(dtype, w, std::size_t(j * k + q));
      if (bias) v += load(dtype, bias, std::size_t(j));
      if (act == 1) v = activate(Activation::gelu, v);
      if (act == 2) v = activate(Activation::gelu_tanh, v);
      if (act == 3) v = activate(Activation::silu, v);
      if (residual) v += load(dtype, residual, std::size_t(i * n + j));
      store(dtype, out, std::size_t(i * n + j), float(v));
    }
}

void group_gemm(DType dtype, const void* x, const void* w, const std::int64_t* offsets, void* out, std::int64_t groups,
                std::int64_t n, std::int64_t k) {
  const std::size_t es = dtype_size(dtype);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t rows = offsets[g + 1] - offsets[g];
    if (rows <= 0) continue;
    linear(dtype, static_cast<const std::uint8_t*>(x) + std::size_t(offsets[g] * k) * es,
           static_cast<const std::uint8_t*>(w) + std::size_t(g * n * k) * es, nullptr, nullptr,
           static_cast<std::uint8_t*>(out) + std::size_t(offsets[g] * n) * es, rows, n, k, 0);
  }
}

}  // namespace mojo::reference
