// The MoE routing ops' references: choice by sorting, the dispatch as a
// stable sort, the combine in double.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/reference.hpp"

namespace mojo::reference {

void moe_gate(const MoeGateConfig& g, const std::vector<float>& logits, const std::vector<float>& bias, std::int64_t tokens,
              std::vector<std::int64_t>& ids, std::vector<float>& weights) {
  const std::size_t e_count = std::size_t(g.experts), group = std::size_t(g.experts / g.groups);
  ids.assign(std::size_t(tokens * g.top_k), -1);
  weights.assign(std::size_t(tokens * g.top_k), 0.f);
  std::vector<double> score(e_count), choice(e_count);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* l = logits.data() + t * g.experts;
    const double max = *std::max_element(l, l + g.experts);
    double sum = 0;
    for (std::size_t e = 0; e < e_count; ++e) sum += std::exp(double(l[e]) - max);
    for (std::size_t e = 0; e < e_count; ++e) {
      score[e] = g.softmax ? std::exp(double(l[e]) - max) / sum : 1.0 / (1.0 + std::exp(-double(l[e])));
      choice[e] = bias.empty() ? double(l[e]) : score[e] + double(bias[e]);
    }
    std::vector<bool> allowed(e_count, true);
    if (g.groups > 1) {
      std::vector<double> group_score(std::size_t(g.groups));
      for (std::size_t k = 0; k < group_score.size(); ++k) {
        std::vector<double> members(choice.begin() + std::ptrdiff_t(k * group),
                                    choice.begin() + std::ptrdiff_t((k + 1) * group));
        std::sort(members.rbegin(), members.rend());
        group_score[k] = members[0] + (group > 1 ? members[1] : 0.0);
      }
      std::vector<std::size_t> order(group_score.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](auto a, auto b) {  // ties: the lower group (as stable_sort would)
        return group_score[a] > group_score[b] || (group_score[a] == group_score[b] && a < b);
      });
      std::vector<bool> kept(group_score.size(), false);
      for (std::int64_t k = 0; k < g.top_groups; ++k) kept[order[std::size_t(k)]] = true;
      for (std::size_t e = 0; e < e_count; ++e) allowed[e] = kept[e / group];
    }
    std::vector<std::size_t> order;
    for (std::size_t e = 0; e < e_count; ++e)
      if (allowed[e]) order.push_back(e);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) {  // ties: the lower expert
      return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
    });
    double total = 0;
    for (std::int64_t k = 0; k < g.top_k && std::size_t(k) < order.size(); ++k) total += score[order[std::size_t(k)]];
    const double norm = g.renormalize && total > 0 ? g.scaling / total : g.scaling;
    for (std::int64_t k = 0; k < g.top_k && std::size_t(k) < order.size(); ++k) {
      const std::size_t e = order[std::size_t(k)], at = std::size_t(t * g.top_k + k);
      ids[at] = std::int64_t(e);
      weights[at] = float(score[e] * norm);
    }
  }
}

void moe_dispatch(const std::vector<std::int64_t>& ids, std::int64_t top_k, std::int64_t experts,
                  std::vector<std::int64_t>& offsets, std::vector<std::int64_t>& sorted_ids,
                  std::vector<std::int64_t>& positions) {
  offsets.assign(std::size_t(experts + 1), 0);
  sorted_ids.assign(ids.size(), -1);
  positions.assign(ids.size(), -1);
  std::int64_t row = 0;
  for (std::int64_t e = 0; e < experts; ++e) {
    offsets[std::size_t(e)] = row;
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == e) {
        sorted_ids[std::size_t(row)] = std::int64_t(i) / top_k;
        positions[i] = row++;
      }
  }
  offsets[std::size_t(experts)] = row;
}

void moe_combine(DType dtype, const void* expert_out, const std::int64_t* positions, const float* weights, void* out,
                 std::int64_t tokens, std::int64_t top_k, std::int64_t hidden) {
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < hidden; ++h) {
      double acc = 0;
      for (std::int64_t k = 0; k < top_k; ++k) {
        const std::int64_t row = positions[t * top_k + k];
        if (row >= 0) acc += double(weights[t * top_k + k]) * load(dtype, expert_out, std::size_t(row * hidden + h));
      }
      store(dtype, out, std::size_t(t * hidden + h), float(acc));
    }
}

}  // namespace mojo::reference
