// Attention (sdpa, paged_prefill_gqa, paged_decode_gqa): params, plans and
// errors without a GPU, and every feature against the float64 reference on
// the device (the GPU, or the CPU device emulating sm_80).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "attention_args.h"
#include "mojo/check.hpp"
#include "mojo/perf_model.hpp"
#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(AttentionOp, PrefillPacksTheGroupIntoRowsAndDecodeSplitsTheKeys) {
  EXPECT_EQ(
      params("sdpa", DType::bf16, "q=4096x32x128 k=4096x8x128").str(),
      "dtype=bf16 head_dim=128 group=4 wm=4 wn=1 bn=64 stages=2 causal=1 window=0 softcap=0 sinks=0 lse=0 varlen=0 "
      "paged=0 page=0 splits=1 wgmma=0 gather=0 persistent=0");
  // Batch 32 x 8 KV heads is 256 blocks, 3 an SM: split each 8k context in three (768 blocks, 1.94 waves of
  // 396), a partial pass and a merge.
  const OpDef& decode = find_op("paged_decode_gqa");
  const auto t = example(decode, DType::bf16, "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512");
  const Params p = decode.specialize(t, {}, kSm90);
  EXPECT_EQ(p.get("splits"), 3);
  EXPECT_EQ(p.get("wm"), 1);
  EXPECT_EQ(p.get("wn"), 4);
  const std::vector<Params> plan = decode.plan(p);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(decode.entry_macro(plan[1]), "MOJO_ATTENTION_MERGE");
  EXPECT_NE(decode.kernel_name(plan[0]), decode.kernel_name(plan[1]));
  EXPECT_EQ(decode.workspace_bytes(p, t), 3u * 32 * 32 * (128 + 1) * 4) << "O and lse per split, token and head";
  EXPECT_EQ(decode.geometry(plan[0], t).grid.z, 3u);
  // One long sequence fills the GPU by itself: no split, one kernel, no workspace.
  const auto big = example(decode, DType::bf16, "q=256x32x128 k_cache=16384x16x8x128 block_tables=256x64");
  const Params one = decode.specialize(big, {}, kSm90);
  EXPECT_EQ(decode.plan(one).size(), 1u);
  EXPECT_EQ(decode.workspace_bytes(one, big), 0u);
}

// The issue-27 model test for decode: Qwen3-8B's paged decode (32 query heads over 8 KV heads, head_dim 128,
// pages of 16) splits its keys so that the blocks fill the GPU as the performance model counts it: the
// target's SMs x the blocks an SM holds. One partial wave takes the most splits (16, at least 512 keys each);
// more than one fills its last wave to at least 85%. The fixed rule before (about 512 blocks) left B 32's
// last wave 65% full on sm_90a.
TEST(AttentionOp, DecodeSplitsFillTheLastWaveOfTheModel) {
  const OpDef& decode = find_op("paged_decode_gqa");
  for (const char* arch : {"sm_90a", "sm_80"})
    for (std::int64_t context : {8192, 32768})
      for (std::int64_t batch : {1, 8, 32, 64, 128, 256}) {
        SCOPED_TRACE(fmt::format("{} batch {} context {}", arch, batch, context));
        const Target target = Target::parse(arch);
        const std::int64_t pages = context / 16;
        const auto t = example(decode, DType::bf16,
                               fmt::format("q={}x32x128 k_cache={}x16x8x128 block_tables={}x{}", batch,
                                           batch * pages, batch, pages));
        const Params p = decode.specialize(t, {}, target);
        const LaunchGeometry g = decode.geometry(decode.plan(p).front(), t);
        const SmLimits limits = sm_limits(target);
        const int per_sm = occupancy(limits, g.block.x, 0, g.dynamic_smem, 1, 1).blocks_per_sm;
        const std::uint64_t blocks = std::uint64_t(g.grid.x) * g.grid.y * g.grid.z,
                            slots = std::uint64_t(limits.sm_count) * std::uint64_t(per_sm);
        EXPECT_EQ(g.grid.z, std::uint64_t(p.get("splits")));
        if (std::uint64_t(g.grid.x) * g.grid.y * 16 <= slots)
          EXPECT_EQ(p.get("splits"), 16) << "one partial wave: the most splits";
        else
          EXPECT_GE(wave_fill(blocks, slots), 0.85) << p.str() << ": " << blocks << " blocks in " << slots << " slots";
      }
}

// Every kernel of a plan takes one mojo_attention::Args (attention_args.h): the split plan's merge too.
TEST(AttentionOp, EveryKernelOfThePlanTakesOneArgsStruct) {
  const OpDef& decode = find_op("paged_decode_gqa");
  auto t = example(decode, DType::bf16, "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512");
  for (std::size_t i = 0; i < t.size(); ++i)
    if (t[i].spec.rank() != 0) t[i].data = DevicePtr(i + 1) << 20;  // distinct, aligned, never read
  const std::vector<ScalarArg> scalars = {{"window", 100}};
  const Params p = decode.specialize(t, scalars, kSm90);
  const Workspace workspace{.scratch = DevicePtr(1) << 30};
  const std::vector<Params> plan = decode.plan(p);
  ASSERT_EQ(plan.size(), 2u);
  for (const Params& step : plan) {
    SCOPED_TRACE(step.str());
    KernelArgs args;
    decode.pack_args(step, t, scalars, workspace, args);
    const auto& a = packed<mojo_attention::Args<void>>(args);
    EXPECT_EQ(a.out, ptr(t[0]));
    EXPECT_EQ(a.q, ptr(t[1]));
    EXPECT_EQ(a.k, ptr(t[2]));
    EXPECT_EQ(a.v, ptr(t[3]));
    EXPECT_EQ(a.cu_q, nullptr);
    EXPECT_EQ(a.kv_info, ptr(t[5])) << "paged: the context lengths";
    EXPECT_EQ(a.block_table, ptr(t[4]));
    EXPECT_EQ(a.sinks, nullptr);
    EXPECT_EQ(a.lse, nullptr);
    EXPECT_EQ(a.workspace, ptr(workspace.scratch));
    EXPECT_EQ(a.q_stride, 32 * 128);
    EXPECT_EQ(a.batch, 32);
    EXPECT_EQ(a.q_tokens, 32);
    EXPECT_EQ(a.kv_tokens, 16384) << "paged: the number of pages";
    EXPECT_EQ(a.heads, 32);
    EXPECT_EQ(a.kv_heads, 8);
    EXPECT_EQ(a.max_blocks, 512);
    EXPECT_EQ(a.q_len, 1);
    EXPECT_EQ(a.chunk, 2736) << "keys per split: 8192 / 3 in whole key tiles of 16";
    EXPECT_FLOAT_EQ(a.scale, 1.f / std::sqrt(128.f)) << "1 / sqrt(head_dim) by default";
    EXPECT_FLOAT_EQ(a.softcap, 0.f);
    EXPECT_EQ(a.window, 100);
  }
}

// The sm_90a prefill (TMA + wgmma) for every head_dim and paged cache on sm_90a; the sm_80 path everywhere else.
TEST(AttentionOp, HopperPrefillTakesTheWgmmaPath) {
  auto path_with = [](const char* op, const char* shapes, ScalarList scalars, const char* arch) {
    const OpDef& def = find_op(op);
    return def.specialize(example(def, DType::bf16, shapes), scalars, Target::parse(arch)).get("wgmma");
  };
  auto path = [&](const char* op, const char* shapes, const char* arch) { return path_with(op, shapes, {}, arch); };
  EXPECT_EQ(path("sdpa", "q=4096x32x128 k=4096x8x128", "sm_90a"), 1);
  EXPECT_EQ(path("sdpa", "q=4096x32x128 k=4096x8x128", "sm_90"), 0) << "wgmma needs the arch-specific target";
  EXPECT_EQ(path("sdpa", "q=4096x32x64 k=4096x8x64", "sm_90a"), 1);
  EXPECT_EQ(path("sdpa", "q=4096x32x256 k=4096x8x256", "sm_90a"), 1);
  EXPECT_EQ(path("sdpa", "q=4096x32x96 k=4096x8x96", "sm_90a"), 1) << "as 128 columns, the last 32 zeros";
  const char* paged = "q=512x32x128 k_cache=1024x16x8x128 cu_seqlens_q=3 block_tables=2x64";
  EXPECT_EQ(path("paged_decode_gqa", "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512", "sm_90a"), 0);
  // A paged cache of any block size: its key tiles through TMA boxes of whole blocks (8 tokens or more, tiling the
  // key tile) or of part of one block (a multiple of the key tile), else gathered by the producer warpgroup; at
  // head_dim 256 tiles of 80 keys, or of 64 where only 64 takes TMA boxes.
  auto keys_of = [](std::int64_t head_dim, std::int64_t page) {
    const OpDef& def = find_op("paged_prefill_gqa");
    const std::int64_t blocks = (2048 + page - 1) / page;
    const auto t = example(
        def, DType::bf16,
        fmt::format("q=512x32x{0} k_cache={1}x{2}x8x{0} cu_seqlens_q=3 block_tables=2x{1}", head_dim, blocks, page));
    const Params p = def.specialize(t, {}, Target::parse("sm_90a"));
    EXPECT_EQ(p.get("wgmma"), 1) << head_dim << " " << page;
    EXPECT_EQ(def.entry_macro(p), p.get("gather") ? "MOJO_ATTENTION_SM90_GATHER" : "MOJO_ATTENTION_SM90");
    return fmt::format("{} {}", p.get("bn"), p.get("gather") ? "gathered" : "TMA");
  };
  EXPECT_EQ(keys_of(128, 16), "128 TMA");
  EXPECT_EQ(keys_of(128, 8), "128 TMA");
  EXPECT_EQ(keys_of(128, 256), "128 TMA") << "a key tile within a block";
  EXPECT_EQ(keys_of(128, 1), "128 gathered") << "SGLang's blocks of one token";
  EXPECT_EQ(keys_of(128, 4), "128 gathered") << "under the swizzle's 8 rows";
  EXPECT_EQ(keys_of(128, 12), "128 gathered") << "12 does not divide 128";
  EXPECT_EQ(keys_of(128, 160), "128 gathered") << "nor does 128 divide 160";
  EXPECT_EQ(keys_of(64, 32), "128 TMA");
  EXPECT_EQ(keys_of(256, 16), "80 TMA");
  EXPECT_EQ(keys_of(256, 32), "64 TMA") << "blocks of 32 tokens tile 64 keys, not 80";
  EXPECT_EQ(keys_of(256, 128), "64 TMA");
  EXPECT_EQ(keys_of(256, 1), "80 gathered");
  EXPECT_EQ(keys_of(256, 96), "80 gathered");
  // Key tiles of 176 where no mask thins them (FlashAttention 3's for head_dim 128) and they take fewer rounds
  // than 128 over a sequence's keys, 128 under a causal mask or a window, and for a paged cache, whose blocks of
  // 32 to 128 tokens do not tile 176 keys.
  auto key_tile = [](const char* op, const char* shapes, ScalarList scalars) {
    const OpDef& def = find_op(op);
    return def.specialize(example(def, DType::bf16, shapes), scalars, Target::parse("sm_90a")).get("bn");
  };
  const char* dense = "q=4096x32x128 k=4096x8x128";
  EXPECT_EQ(key_tile("sdpa", dense, {{"causal", 0}}), 176);
  EXPECT_EQ(key_tile("sdpa", "q=300x8x128 k=900x8x128 cu_seqlens_q=4 cu_seqlens_k=4", {{"causal", 0}}), 176)
      << "3 sequences of 300 keys on average: 2 tiles of 176 or 3 of 128";
  EXPECT_EQ(key_tile("sdpa", "q=200x8x128 k=200x8x128", {{"causal", 0}}), 128) << "2 tiles either way";
  EXPECT_EQ(key_tile("sdpa", "q=170x8x128 k=170x8x128", {{"causal", 0}}), 176) << "1 tile of 176, or 2 of 128";
  EXPECT_EQ(key_tile("sdpa", dense, {}), 128);
  EXPECT_EQ(key_tile("sdpa", dense, {{"causal", 0}, {"window", 1024}}), 128);
  EXPECT_EQ(key_tile("paged_prefill_gqa", paged, {}), 128);
  EXPECT_EQ(key_tile("sdpa", dense, {{"causal", 0}, {"key_tile", 128}}), 128) << "pinned, for an A/B";
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              key_tile("sdpa", dense, {{"key_tile", 176}});
            }),
            "sdpa: key_tile is 176; expected 0 (the heuristic), 128, or 176 (with neither a causal mask nor a window)");
  // Head_dim 256 takes tiles of 80 keys (O holds 128 registers a thread), masked or not; nothing else fits.
  const char* wide = "q=4096x32x256 k=4096x8x256";
  EXPECT_EQ(key_tile("sdpa", wide, {}), 80);
  EXPECT_EQ(key_tile("sdpa", wide, {{"causal", 0}}), 80);
  // A paged cache at head_dim 256: 80 keys where its blocks tile them, 64 for blocks of 32 or 64 tokens.
  EXPECT_EQ(key_tile("paged_prefill_gqa", "q=512x32x256 k_cache=1024x16x8x256 cu_seqlens_q=3 block_tables=2x64", {}),
            80);
  EXPECT_EQ(key_tile("paged_prefill_gqa", "q=512x32x256 k_cache=512x32x8x256 cu_seqlens_q=3 block_tables=2x32", {}),
            64);
  EXPECT_EQ(key_tile("paged_prefill_gqa", "q=512x32x256 k_cache=256x64x8x256 cu_seqlens_q=3 block_tables=2x16", {}),
            64);
  EXPECT_EQ(key_tile("sdpa", "q=4096x32x64 k=4096x8x64", {{"causal", 0}}), 176);
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              key_tile("sdpa", wide, {{"causal", 0}, {"key_tile", 128}});
            }),
            "sdpa: key_tile is 128; head_dim 256 takes key tiles of 80 only (expected 0)");
  const OpDef& sdpa = find_op("sdpa");
  const auto t = example(sdpa, DType::bf16, "q=4096x32x128 k=4096x8x128");
  const Params p = sdpa.specialize(t, {}, Target::parse("sm_90a"));
  // Autotuning times the other key tile where there is a choice (without a mask, on the sm_90a path, unpinned), the
  // persistent grid, then the sm_80 path.
  const Tunable& tuning = *sdpa.tuning();
  const Target sm90a = Target::parse("sm_90a"), sm80 = Target::parse("sm_80");
  const std::vector<ScalarArg> open{{"causal", 0}}, pinned{{"causal", 0}, {"key_tile", 128}};
  const auto all = tuning.candidates(sdpa.specialize(t, open, sm90a), t, open, sm90a);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].get("bn"), 176) << "the heuristic's first";
  EXPECT_EQ(all[1], sdpa.specialize(t, pinned, sm90a));
  EXPECT_EQ(all[2].get("persistent"), 1);
  EXPECT_EQ(all[2].get("bn"), 176);
  EXPECT_EQ(all[3].get("wgmma"), 0) << "then the sm_80 path";
  const auto causal = tuning.candidates(p, t, {}, sm90a);
  ASSERT_EQ(causal.size(), 3u) << "causal: 128 only, persistent or not, and the sm_80 path";
  EXPECT_EQ(causal[1].get("persistent"), 1);
  EXPECT_EQ(causal[2].get("wgmma"), 0);
  EXPECT_EQ(tuning.candidates(sdpa.specialize(t, pinned, sm90a), t, pinned, sm90a).size(), 3u)
      << "the key tile pinned: the persistent grid and the sm_80 path beside it";
  const std::vector<ScalarArg> on_90{{"path", 90}};
  EXPECT_EQ(tuning.candidates(sdpa.specialize(t, on_90, sm90a), t, on_90, sm90a).size(), 1u) << "the path pinned";
  EXPECT_EQ(tuning.candidates(sdpa.specialize(t, open, sm80), t, open, sm80).size(), 1u) << "one path on sm_80";
  const auto d256 = example(sdpa, DType::bf16, "q=4096x32x256 k=4096x8x256");
  EXPECT_EQ(tuning.candidates(sdpa.specialize(d256, {}, sm90a), d256, {}, sm90a).size(), 3u)
      << "head_dim 256: one key tile, persistent or not, and the sm_80 path";
  // The path pinned, for an A/B on one GPU: 80 anywhere, 90 on sm_90a.
  EXPECT_EQ(path_with("sdpa", "q=4096x32x64 k=4096x8x64", {{"path", 80}}, "sm_90a"), 0);
  EXPECT_EQ(path_with("sdpa", "q=4096x32x64 k=4096x8x64", {{"path", 90}}, "sm_90a"), 1);
  EXPECT_EQ(path_with("paged_prefill_gqa", paged, {{"path", 80}}, "sm_90a"), 0);
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              path_with("sdpa", dense, {{"path", 90}}, "sm_90");
            }),
            "sdpa: path = 90 (TMA + wgmma) needs an sm_90a target; this one is sm_90");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              path_with("paged_prefill_gqa", paged, {{"path", 90}}, "sm_80");
            }),
            "paged_prefill_gqa: path = 90 (TMA + wgmma) needs an sm_90a target; this one is sm_80");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              path_with("sdpa", dense, {{"path", 86}}, "sm_90a");
            }),
            "sdpa: path is 86; expected 0 (the heuristic's choice), 80 or 90");
  EXPECT_EQ(tuning.bucket(example(sdpa, DType::bf16, "q=3000x32x128 k=9000x8x128 cu_seqlens_q=3 cu_seqlens_k=3")),
            "tokens<=2048 keys<=8192");
  // The paged prefill: its one key tile, and the sm_80 path; its bucket's keys are a block table's reach.
  const OpDef& prefill = find_op("paged_prefill_gqa");
  const auto pt = example(prefill, DType::bf16, paged);
  const auto paged_all = prefill.tuning()->candidates(prefill.specialize(pt, {}, sm90a), pt, {}, sm90a);
  ASSERT_EQ(paged_all.size(), 3u);
  EXPECT_EQ(paged_all[1].get("persistent"), 1);
  EXPECT_EQ(paged_all[2].get("wgmma"), 0);
  EXPECT_EQ(prefill.tuning()->bucket(pt), "tokens<=256 keys<=1024") << "2 sequences of 256, 64 blocks of 16";
  EXPECT_EQ(find_op("paged_decode_gqa").tuning(), nullptr);
  EXPECT_EQ(sdpa.entry_macro(p), "MOJO_ATTENTION_SM90");
  EXPECT_EQ(sdpa.geometry(p, t).block.x, 384u);
  EXPECT_EQ(sdpa.geometry(p, t).grid.x, 4096u * 4 / 128);
  // Query tiles of 192 rows at head_dim 64 (FlashAttention 3's there): three consumer warpgroups, key tiles of 128
  // with or without a mask; pinned, and timed by autotuning beside the heuristic's 128.
  const auto d64 = example(sdpa, DType::bf16, "q=4096x32x64 k=4096x8x64");
  const std::vector<ScalarArg> rows_192{{"query_tile", 192}}, open_192{{"causal", 0}, {"query_tile", 192}};
  const Params p192 = sdpa.specialize(d64, rows_192, sm90a);
  EXPECT_EQ(p192.get("wm"), 12);
  EXPECT_EQ(p192.get("bn"), 128);
  EXPECT_EQ(sdpa.specialize(d64, open_192, sm90a).get("bn"), 128) << "not 176: three consumers' registers";
  EXPECT_EQ(sdpa.specialize(d64, {}, sm90a).get("wm"), 8) << "the heuristic: 128 rows until a GPU times 192";
  EXPECT_EQ(sdpa.geometry(p192, d64).block.x, 512u);
  EXPECT_EQ(sdpa.geometry(p192, d64).grid.x, (4096u * 4 + 191) / 192);
  EXPECT_EQ(sdpa.max_dynamic_smem(p192), sdpa.max_dynamic_smem(sdpa.specialize(d64, {}, sm90a)) + 64 * 64 * 2)
      << "a third Q tile";
  const auto d64_all = tuning.candidates(sdpa.specialize(d64, {}, sm90a), d64, {}, sm90a);
  ASSERT_EQ(d64_all.size(), 4u) << "128 rows, 192, the persistent grid, and the sm_80 path";
  EXPECT_EQ(d64_all[1], p192);
  EXPECT_EQ(d64_all[3].get("wgmma"), 0);
  EXPECT_EQ(tuning.candidates(p192, d64, rows_192, sm90a).size(), 1u)
      << "pinned: neither the persistent grid nor the sm_80 path takes such a tile";
  const auto paged64 =
      example(prefill, DType::bf16, "q=512x32x64 k_cache=16384x1x8x64 cu_seqlens_q=3 block_tables=2x8192");
  const Params pp192 = prefill.specialize(paged64, rows_192, sm90a);
  EXPECT_EQ(pp192.get("wm"), 12);
  EXPECT_EQ(prefill.entry_macro(pp192), "MOJO_ATTENTION_SM90_GATHER");
  auto query_tile_error = [&](const char* shapes, ScalarList scalars, const char* arch) {
    return error_of<InvalidArgumentError>(
        [&] { sdpa.specialize(example(sdpa, DType::bf16, shapes), scalars, Target::parse(arch)); });
  };
  EXPECT_EQ(query_tile_error(dense, rows_192, "sm_90a"),
            "sdpa: query_tile 192 takes head_dim 64 on the sm_90a path, with key tiles of 128; this is head_dim 128 "
            "on that path, key_tile 0");
  EXPECT_EQ(
      query_tile_error("q=4096x32x64 k=4096x8x64", {{"causal", 0}, {"key_tile", 176}, {"query_tile", 192}}, "sm_90a"),
      "sdpa: query_tile 192 takes head_dim 64 on the sm_90a path, with key tiles of 128; this is head_dim 64 on "
      "that path, key_tile 176");
  EXPECT_EQ(query_tile_error("q=4096x32x64 k=4096x8x64", rows_192, "sm_80"),
            "sdpa: query_tile 192 takes head_dim 64 on the sm_90a path, with key tiles of 128; this is head_dim 64 on "
            "the sm_80 path");
  EXPECT_EQ(query_tile_error("q=4096x32x64 k=4096x8x64", {{"query_tile", 64}}, "sm_90a"),
            "sdpa: query_tile is 64; expected 0 (the heuristic), 128 or 192");
  // The persistent grid (persistent=1): (tile, KV head) pairs for the runtime to clamp to the SMs, each block
  // looping over every grid-th of them; the sm_90a path only.
  const Params pp = sdpa.specialize(t, {{"persistent", 1}}, sm90a);
  const LaunchGeometry pg = sdpa.geometry(pp, t);
  EXPECT_TRUE(pg.persistent);
  EXPECT_EQ(pg.grid.x, 4096u * 4 / 128 * 8);
  EXPECT_EQ(pg.grid.y, 1u);
  EXPECT_EQ(sdpa.block_work(pp, t), sdpa.block_work(p, t)) << "the same tiles in the same order";
  EXPECT_EQ(query_tile_error(dense, {{"persistent", 1}}, "sm_80"),
            "sdpa: persistent = 1 takes the sm_90a path; this is the sm_80 path");
  EXPECT_EQ(query_tile_error(dense, {{"persistent", 2}}, "sm_90a"), "sdpa: persistent is 2; expected 0 or 1");
  EXPECT_EQ(query_tile_error("q=4096x32x64 k=4096x8x64", {{"query_tile", 192}, {"persistent", 1}}, "sm_90a"),
            "sdpa: persistent = 1 takes query tiles of 128 rows, not 192");
}

// The causal prefill's tiles, longest first (find_work, place_block): per KV head of Qwen3-8B's 4096-token
// prefill, tiles of 32 tokens see 1 to 32 key tiles (and one more for Q and the output), each rank for every head
// before the next (the 8 heads' keys and values, 16 MB, fit in L2 together), and given out in that order the 132
// SMs end within 1% of the ideal; in the opposite order (shortest first) the last long tiles run alone. So a
// persistent scheduler could win back the blocks' start-up, not the balance. Several sequences go by rank:
// each one's longest tile, then each one's second, ...: one sequence after another left the SMs 9% idle.
TEST(AttentionOp, CausalTilesLongestFirstKeepTheSmsBusy) {
  const OpDef& sdpa = find_op("sdpa");
  const Target sm90a = Target::parse("sm_90a");
  const auto t = example(sdpa, DType::bf16, "q=4096x32x128 k=4096x8x128");
  const Params p = sdpa.specialize(t, {}, sm90a);
  const std::vector<double> work = sdpa.block_work(p, t);
  ASSERT_EQ(work.size(), 128u * 8);
  // Each rank for the 8 heads, then the next: longest first.
  auto in_sections = [](const std::vector<double>& w, std::size_t heads) {
    for (std::size_t at = 0; at < w.size(); ++at)
      if (w[at] != w[at / heads * heads]) return false;
    return true;
  };
  EXPECT_TRUE(in_sections(work, 8));
  EXPECT_TRUE(std::is_sorted(work.rbegin(), work.rend()));
  EXPECT_EQ(work[0], 33.0) << "the last 32 tokens see all 32 key tiles";
  EXPECT_EQ(work.back(), 2.0) << "the first 32 tokens, one key tile";
  EXPECT_GE(in_order_balance(work, 132), 0.99);
  EXPECT_LT(in_order_balance(std::vector<double>(work.rbegin(), work.rend()), 132), 0.95) << "shortest first";
  // A persistent grid (persistent=1) of 132 blocks takes the same tiles round by round in snake order; in plain
  // order (block b the b-th of every round) block 0 would take each round's longest.
  EXPECT_EQ(sdpa.block_work(sdpa.specialize(t, {{"persistent", 1}}, sm90a), t), work);
  EXPECT_GE(snake_balance(work, 132), 0.99);
  std::vector<double> plain(132, 0.0);
  for (std::size_t i = 0; i < work.size(); ++i) plain[i % 132] += work[i];
  EXPECT_LT(in_order_balance(plain, 132), 0.9);
  // Query tiles of 192 rows at head_dim 64 (query_tile=192): 86 a head (the longest first is a part tile of 64 rows,
  // the last 16 tokens), in the same order, the SMs about as busy.
  const auto d64 = example(sdpa, DType::bf16, "q=4096x32x64 k=4096x8x64");
  const std::vector<double> tall = sdpa.block_work(sdpa.specialize(d64, {{"query_tile", 192}}, sm90a), d64);
  ASSERT_EQ(tall.size(), 86u * 8);
  EXPECT_TRUE(in_sections(tall, 8));
  EXPECT_TRUE(std::is_sorted(tall.rbegin(), tall.rend()));
  EXPECT_EQ(tall[0], 33.0);
  EXPECT_EQ(tall.back(), 2.0) << "the first 48 tokens, one key tile";
  EXPECT_GE(in_order_balance(tall, 132), 0.98);
  // Head by head, as the grid's y took the heads until place_block, a head's tiles fill the SMs once or less:
  // each wave ends with its shortest tiles. Gemma's head_dim 256 at 16/8 heads: 64 tiles of 1 to 52 key tiles.
  auto head_by_head = [](const std::vector<double>& w, std::size_t heads) {
    std::vector<double> order;
    for (std::size_t head = 0; head < heads; ++head)
      for (std::size_t at = head; at < w.size(); at += heads) order.push_back(w[at]);
    return order;
  };
  const auto gemma = example(sdpa, DType::bf16, "q=4096x16x256 k=4096x8x256");
  const std::vector<double> wide = sdpa.block_work(sdpa.specialize(gemma, {}, sm90a), gemma);
  ASSERT_EQ(wide.size(), 64u * 8);
  EXPECT_GE(in_order_balance(wide, 132), 0.99);
  EXPECT_LT(in_order_balance(head_by_head(wide, 8), 132), 0.82);
  // Sections of heads whose keys and values fit in 32 MB: 16,384 tokens' are 8 MB a head, so 4 heads a section.
  const auto long_prompt = example(sdpa, DType::bf16, "q=16384x32x128 k=16384x8x128");
  const std::vector<double> four = sdpa.block_work(sdpa.specialize(long_prompt, {}, sm90a), long_prompt);
  ASSERT_EQ(four.size(), 512u * 8);
  const std::vector<double> first_section(four.begin(), four.begin() + 512 * 4);
  EXPECT_TRUE(in_sections(first_section, 4));
  EXPECT_TRUE(std::is_sorted(first_section.rbegin(), first_section.rend()));
  EXPECT_TRUE(std::equal(first_section.begin(), first_section.end(), four.begin() + 512 * 4))
      << "the second section as the first";
  EXPECT_GE(in_order_balance(four, 132), 0.99);
  // Two sequences of 2048 (their grid has a spare tile for each): by rank, then by sequence, then by head.
  const auto two = example(sdpa, DType::bf16, "q=4096x32x128 k=4096x8x128 cu_seqlens_q=3 cu_seqlens_k=3");
  const Params varlen = sdpa.specialize(two, {}, sm90a);
  EXPECT_EQ(varlen.get("varlen"), 1);
  const std::vector<double> both = sdpa.block_work(varlen, two);
  ASSERT_EQ(both.size(), 130u * 8);
  EXPECT_EQ(both[0], 17.0);
  EXPECT_EQ(both[8], 17.0) << "the second sequence's longest tile";
  EXPECT_EQ(both[8 * 127], 2.0) << "its shortest";
  EXPECT_EQ(both[8 * 128], 0.0) << "no sequence's tile";
  EXPECT_GE(in_order_balance(both, 132), 0.98) << "one sequence after another: 0.91; head by head 0.97";
  EXPECT_NEAR(in_order_balance(head_by_head(both, 8), 132), 0.97, 0.005);
  EXPECT_TRUE(sdpa.block_work(sdpa.specialize(t, {{"causal", 0}}, sm90a), t).empty())
      << "without the mask every tile sees every key";
}

// Through each compiler to a cubin: no local memory; on the sm_90a path HGMMA left asynchronous, setmaxnreg
// kept and TMA loads, HMMA on the sm_80 one, when nvdisasm is at hand.
struct AttentionCompiles : ::testing::TestWithParam<std::string> {};
TEST_P(AttentionCompiles, HopperPrefillIsHgmmaWithoutLocalMemory) {
  Runtime rt(memory_only(GetParam()));
  bool disassembled = false;
  struct Case {
    const char* op;
    const char* shapes;
    const char* arch;
    int wgmma;
    double causal = 1;
    bool gathered = false;  // K and V by cp.async, not TMA
    double query_tile = 0;
    double persistent = 0;
  };
  const Case cases[] = {
      {"sdpa", "q=4096x32x128 k=4096x8x128 lse=32x4096", "sm_90a", 1},
      // Not causal: key tiles of 176. LLVM's build spilled 152 to 200 bytes here while its masks were selects,
      // which it turned into branches (mojo::select_f keeps them one instruction).
      {"sdpa", "q=4096x32x128 k=4096x8x128 cu_seqlens_q=5 cu_seqlens_k=5 lse=32x4096", "sm_90a", 1, 0},
      {"paged_prefill_gqa", "q=512x32x128 k_cache=1024x16x8x128 cu_seqlens_q=3 block_tables=2x64", "sm_90a", 1},
      // Several sequences (their tiles by rank) and lse: LLVM's build spilled 8 to 48 bytes here while it kept
      // Q's wgmma descriptors live through the loop.
      {"sdpa", "q=4096x32x128 k=4096x8x128 cu_seqlens_q=5 cu_seqlens_k=5 lse=32x4096", "sm_90a", 1},
      {"paged_prefill_gqa", "q=512x32x128 k_cache=1024x16x8x128 cu_seqlens_q=3 block_tables=2x64 lse=32x512", "sm_90a",
       1},
      // Head_dim 64 (P V 64 wide), 96 (as 128) and 256 (key tiles of 80, P V 256 wide, O 128 registers a thread).
      {"sdpa", "q=4096x32x64 k=4096x8x64 lse=32x4096", "sm_90a", 1},
      {"sdpa", "q=4096x32x96 k=4096x8x96", "sm_90a", 1, 0},
      {"sdpa", "q=4096x32x256 k=4096x8x256 cu_seqlens_q=5 cu_seqlens_k=5 lse=32x4096", "sm_90a", 1},
      {"paged_prefill_gqa", "q=512x32x256 k_cache=512x32x8x256 cu_seqlens_q=3 block_tables=2x32", "sm_90a", 1},
      // A paged cache of one-token blocks: the producer warpgroup gathers the keys within its 40 registers (NVRTC's
      // spilled 40 bytes at head_dim 64 while it unrolled the copies).
      {"paged_prefill_gqa", "q=512x32x128 k_cache=16384x1x8x128 cu_seqlens_q=3 block_tables=2x8192", "sm_90a", 1, 1,
       true},
      {"paged_prefill_gqa", "q=512x32x64 k_cache=16384x1x8x64 cu_seqlens_q=3 block_tables=2x8192", "sm_90a", 1, 1,
       true},
      {"paged_prefill_gqa", "q=512x32x256 k_cache=16384x1x8x256 cu_seqlens_q=3 block_tables=2x8192", "sm_90a", 1, 1,
       true},
      // Query tiles of 192 rows: three consumers within 160 registers each, the producer within 32 (gathering).
      {"sdpa", "q=4096x32x64 k=4096x8x64 cu_seqlens_q=5 cu_seqlens_k=5 lse=32x4096", "sm_90a", 1, 1, false, 192},
      {"paged_prefill_gqa", "q=512x32x64 k_cache=16384x1x8x64 cu_seqlens_q=3 block_tables=2x8192", "sm_90a", 1, 1, true,
       192},
      // The persistent grid: its row tiles handed over in shared memory, not looked up by each warpgroup (that
      // spilled: 8 to 86 local loads and stores), over packed keys with a mask and without (key tiles of 176), a
      // cache gathered, and head_dim 256.
      {"sdpa", "q=4096x32x128 k=4096x8x128 lse=32x4096", "sm_90a", 1, 1, false, 0, 1},
      {"sdpa", "q=4096x32x128 k=4096x8x128", "sm_90a", 1, 0, false, 0, 1},
      {"paged_prefill_gqa", "q=512x32x128 k_cache=16384x1x8x128 cu_seqlens_q=3 block_tables=2x8192", "sm_90a", 1, 1,
       true, 0, 1},
      {"sdpa", "q=4096x32x256 k=4096x8x256 cu_seqlens_q=5 cu_seqlens_k=5", "sm_90a", 1, 1, false, 0, 1},
      {"sdpa", "q=4096x32x128 k=4096x8x128", "sm_80", 0},
      {"paged_decode_gqa", "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512", "sm_90a", 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {} {} causal {} query_tile {} persistent {}", c.op, c.shapes, c.arch, c.causal,
                             c.query_tile, c.persistent));
    const OpDef& op = find_op(c.op);
    const auto t = example(op, DType::bf16, c.shapes);
    const Target target = Target::parse(c.arch);
    std::vector<ScalarArg> scalars;  // sdpa's causal (the paged ops have none), the query tile
    if (c.causal != 1) scalars.push_back({"causal", c.causal});
    if (c.query_tile != 0) scalars.push_back({"query_tile", c.query_tile});
    if (c.persistent != 0) scalars.push_back({"persistent", c.persistent});
    ASSERT_EQ(op.specialize(t, scalars, target).get("wgmma"), c.wgmma);
    const Artifact cubin = rt.compile(c.op, t, scalars, target, Emit::cubin);
    EXPECT_EQ(cubin.resources.stack_bytes, 0u) << "no spills";
    // Head_dim 256's ring and Q take 230,432 bytes: with the cubin's static scratch, still within a block's share.
    EXPECT_LE(op.geometry(op.specialize(t, scalars, target), t).dynamic_smem + cubin.resources.static_shared_bytes,
              max_shared_per_block(target));
    const auto sass = test::sass_facts(*cubin.binary);
    if (!sass) continue;
    disassembled = true;
    if (c.wgmma) test::expect_whole_program_wgmma(*sass);
    EXPECT_EQ(sass->sass.find("HGMMA.64x") != std::string::npos, c.wgmma == 1) << "HGMMA in SASS";
    EXPECT_EQ(sass->tma_loads > 0, c.wgmma == 1 && !c.gathered) << "TMA loads in SASS";
    EXPECT_EQ(sass->hmma > 0, c.wgmma == 0) << "HMMA in SASS";
    EXPECT_EQ(sass->local_memory, 0);
  }
  if (!disassembled)
    GTEST_SKIP() << "compiled and checked for spills; no nvdisasm to read the SASS (tools/setup.sh installs one)";
}
// decode_splits counts the blocks an SM by threads and shared memory; the compiled kernel must hold that many
// with its registers too, or the splits planned as one wave and a bit run as more. Qwen3-8B's decode (q_len 1)
// and a speculative verify (q_len 8, four warps over two row tiles), batch 32, 8k keys. NVRTC's q_len 8 kernel
// took 222 registers on sm_90a (2 blocks an SM where 3 were counted) while its shared addresses were generic
// pointers plus offsets, converted after the add.
TEST_P(AttentionCompiles, DecodeKernelsHoldTheBlocksAnSmTheirSplitsCount) {
  Runtime rt(memory_only(GetParam()));
  const OpDef& decode = find_op("paged_decode_gqa");
  for (const char* arch : {"sm_90a", "sm_80"})
    for (const int q_len : {1, 8}) {
      SCOPED_TRACE(fmt::format("{} q_len {}", arch, q_len));
      const Target target = Target::parse(arch);
      const auto t = example(decode, DType::bf16,
                             fmt::format("q={}x32x128 k_cache=16384x16x8x128 block_tables=32x512", 32 * q_len));
      const Params partial = decode.plan(decode.specialize(t, {}, target)).front();
      const LaunchGeometry g = decode.geometry(partial, t);
      const SmLimits limits = sm_limits(target);
      const int counted = occupancy(limits, g.block.x, 0, g.dynamic_smem, 1, 1).blocks_per_sm;
      const Artifact cubin = rt.compile("paged_decode_gqa", t, {}, target, Emit::cubin);
      const KernelResources r = kernel_resources(*cubin.binary, decode.kernel_name(partial));
      EXPECT_EQ(r.stack_bytes, 0u);
      EXPECT_GE(occupancy(limits, g.block.x, r.registers, g.dynamic_smem + r.static_shared_bytes, 1, 1).blocks_per_sm,
                counted)
          << r.registers << " registers";
    }
}
INSTANTIATE_TEST_SUITE_P(Compilers, AttentionCompiles, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });

TEST(AttentionOp, BadShapesGetOneLineErrors) {
  EXPECT_EQ(error_of<ShapeError>([] { params("sdpa", DType::bf16, "q=16x32x80 k=16x8x80"); }),
            "sdpa: head_dim 80 is not supported; supported: 64, 96, 128, 256");
  EXPECT_EQ(error_of<ShapeError>([] { params("sdpa", DType::bf16, "q=16x32x128 k=16x5x128"); }),
            "sdpa: kv_heads 5 does not divide heads 32");
  EXPECT_EQ(error_of<DTypeError>([] { params("sdpa", DType::f32, "q=16x32x128 k=16x8x128"); }),
            "sdpa: q has dtype f32; supported: f16, bf16");
  EXPECT_EQ(error_of<ShapeError>([] { params("sdpa", DType::bf16, "q=16x32x128 k=16x8x128 cu_seqlens_k=3"); }),
            "sdpa: cu_seqlens_k is i32[3]; give it with cu_seqlens_q, both [batch + 1]");
  EXPECT_EQ(error_of<ShapeError>([] { params("sdpa", DType::bf16, "q=16x32x128 k=16x8x128 sinks=8"); }),
            "sdpa: sinks is f32[8]; expected f32 [32] (one per head)");
  EXPECT_EQ(error_of<ShapeError>([] { params("sdpa", DType::bf16, "q=16x32x128 k=16x8x128 lse=16x32"); }),
            "sdpa: lse is f32[16, 32]; expected f32 [32, 16] ([heads, tokens]), contiguous");
  EXPECT_EQ(error_of<ShapeError>(
                [] { params("paged_decode_gqa", DType::bf16, "q=68x32x128 k_cache=64x16x8x128 block_tables=4x8"); }),
            "paged_decode_gqa: q has 68 tokens for 4 sequences; expected batch x q_len, q_len 1 to 16");
  EXPECT_EQ(error_of<ShapeError>([] {
              params("paged_prefill_gqa", DType::bf16,
                     "q=64x32x128 k_cache=64x16x8x128 cu_seqlens_q=4 block_tables=4x8");
            }),
            "paged_prefill_gqa: block_tables has 4 rows but cu_seqlens_q gives 3 sequences");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("sdpa", DType::bf16, "q=16x32x128 k=16x8x128", {{"softcap", -1.0}});
            }),
            "sdpa: softcap is -1; expected >= 0 (0: none)");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("sdpa", DType::bf16, "q=16x32x128 k=16x8x128", {{"window", std::nan("")}});
            }),
            "sdpa: window is nan; expected a whole number (negative: none)");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("sdpa", DType::bf16, "q=16x32x128 k=16x8x128", {{"window", 2.5}});
            }),
            "sdpa: window is 2.5; expected a whole number (negative: none)");
}

// ---- on the device ----------------------------------------------------------------

struct AttentionGpu : GpuOps {
  void expect_pass(const char* op_name, DType dtype, const std::string& shapes, ScalarList scalars = {},
                   std::uint32_t seed = 3, Runtime* on = nullptr) {
    const OpDef& op = find_op(op_name);
    const std::vector<TensorSpec> specs = op.specs_from_shapes(dtype, parse_shapes(op, shapes));
    const CheckReport r = check_op(on ? *on : *rt, op_name, specs, scalars, seed);
    ASSERT_FALSE(r.outputs.empty());
    for (const auto& out : r.outputs)
      EXPECT_EQ(out.wrong, 0u) << fmt::format("{} {} {}: {} of {} elements of {} outside rtol {} atol {} (max abs {})",
                                              op_name, dtype_name(dtype), shapes, out.wrong, out.elements, out.name,
                                              out.tolerance.rtol, out.tolerance.atol, out.max_abs);
    EXPECT_TRUE(r.overwritten.empty()) << fmt::format("{} {}: wrote {}", op_name, shapes,
                                                      fmt::join(r.overwritten, ", "));
  }
};

// Every head_dim and GQA ratio (1, 4, 8), both dtypes, odd lengths, causal or not.
TEST_P(AttentionGpu, SdpaMatchesTheReferenceForEveryHeadDimAndGroup) {
  for (DType d : {DType::f16, DType::bf16})
    for (std::int64_t head_dim : {64, 96, 128, 256}) {
      const std::int64_t kv_heads = head_dim == 96 ? 1 : head_dim == 256 ? 2 : 1, heads = head_dim == 128 ? 8 : 4;
      SCOPED_TRACE(fmt::format("{} D {} {}/{}", dtype_name(d), head_dim, heads, kv_heads));
      expect_pass("sdpa", d, fmt::format("q=17x{}x{} k=17x{}x{}", heads, head_dim, kv_heads, head_dim));
    }
  expect_pass("sdpa", DType::bf16, "q=1x4x64 k=1x4x64");     // one token
  expect_pass("sdpa", DType::bf16, "q=3x4x64 k=4097x1x64");  // 3 new queries after 4094 keys
  expect_pass("sdpa", DType::bf16, "q=70x4x64 k=70x1x64", {{"causal", 0}});
}

// Varlen (an empty sequence among them), separate key lengths, window (also wider than the sequences),
// soft-cap, sinks and lse together.
TEST_P(AttentionGpu, SdpaVarlenWindowSoftcapSinksAndLse) {
  expect_pass("sdpa", DType::bf16, "q=100x8x64 k=100x2x64 cu_seqlens_q=4 sinks=8 lse=8x100",
              {{"window", 20}, {"softcap", 30.0}});
  expect_pass("sdpa", DType::f16, "q=50x4x128 k=90x4x128 cu_seqlens_q=3 cu_seqlens_k=3 lse=4x50", {{"causal", 0}});
  expect_pass("sdpa", DType::bf16, "q=33x8x64 k=33x1x64", {{"window", 1000}, {"scale", 0.05}});
  // A soft-cap so large that it changes no score: tanh's 1 - 2 / (e^2x + 1) cancelled to 0 there (every score
  // 0 before 2026-11-29); the series keeps them.
  expect_pass("sdpa", DType::bf16, "q=33x4x64 k=33x2x64", {{"softcap", 4294967296.0}});
}

// Paged prefill after cached tokens (chunked prefill): partly filled last pages, block tables out of order,
// an empty sequence, GQA 4 and 8.
TEST_P(AttentionGpu, PagedPrefillReadsTheCacheThroughBlockTables) {
  expect_pass("paged_prefill_gqa", DType::bf16,
              "q=90x8x128 k_cache=64x16x2x128 cu_seqlens_q=4 block_tables=3x8 lse=8x90");
  expect_pass("paged_prefill_gqa", DType::f16, "q=40x8x64 k_cache=40x8x1x64 cu_seqlens_q=3 block_tables=2x16 sinks=8",
              {{"window", 12}, {"softcap", 20.0}});
}

// Decode with one and with several query tokens (speculative verification), split over the keys and merged,
// a context of 4097, sinks and lse through the merge.
TEST_P(AttentionGpu, PagedDecodeSplitsTheKeysAndMerges) {
  expect_pass("paged_decode_gqa", DType::bf16, "q=4x8x128 k_cache=256x16x2x128 block_tables=4x64 sinks=8 lse=8x4");
  expect_pass("paged_decode_gqa", DType::f16, "q=12x8x64 k_cache=128x16x1x64 block_tables=3x40", {{"window", 100}});
  expect_pass("paged_decode_gqa", DType::bf16, "q=8x4x256 k_cache=64x16x4x256 block_tables=2x16 lse=4x8");
  expect_pass("paged_decode_gqa", DType::bf16, "q=1x8x64 k_cache=300x16x1x64 block_tables=1x257");  // up to 4112 keys
}

// The sm_90a prefill (TMA, wgmma, warp-specialised) with every feature: several key tiles, GQA 1/4/8, varlen
// with an empty sequence, window, soft-cap, sinks and lse, paged blocks of 16 and 32 tokens out of order.
TEST_P(AttentionGpu, HopperPrefillMatchesTheReference) {
  Runtime* h = hopper();
  if (h == nullptr) GTEST_SKIP() << "the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)";
  expect_pass("sdpa", DType::bf16, "q=300x8x128 k=300x1x128", {}, 3, h);
  expect_pass("sdpa", DType::f16, "q=300x4x128 k=300x4x128 cu_seqlens_q=4 sinks=4 lse=4x300",
              {{"window", 150}, {"softcap", 30.0}}, 3, h);
  // Not causal: key tiles of 176 (two sequences of 350 keys on average: 2 tiles each, not 3).
  expect_pass("sdpa", DType::bf16, "q=100x8x128 k=700x1x128 cu_seqlens_q=3 cu_seqlens_k=3 lse=8x100", {{"causal", 0}},
              3, h);
  expect_pass("paged_prefill_gqa", DType::bf16,
              "q=200x8x128 k_cache=128x16x2x128 cu_seqlens_q=4 block_tables=3x30 lse=8x200", {}, 3, h);
  // head_dim 64: one 64-column sub-tile of Q, K and V, P V 64 wide (causal: key tiles of 128; not: 176).
  expect_pass("sdpa", DType::bf16, "q=300x8x64 k=300x2x64 cu_seqlens_q=3 lse=8x300", {}, 3, h);
  expect_pass("sdpa", DType::f16, "q=100x4x64 k=400x1x64 sinks=4", {{"causal", 0}, {"softcap", 30.0}}, 3, h);
  expect_pass("paged_prefill_gqa", DType::bf16, "q=150x8x64 k_cache=64x16x2x64 cu_seqlens_q=3 block_tables=2x24",
              {{"window", 40}}, 3, h);
  // head_dim 96: two sub-tiles, the second's last 32 columns zeros (Q's, and K's and V's past the tensor).
  expect_pass("sdpa", DType::bf16, "q=200x8x96 k=200x2x96 cu_seqlens_q=3 lse=8x200", {}, 3, h);
  expect_pass("sdpa", DType::f16, "q=100x4x96 k=300x4x96", {{"causal", 0}}, 3, h);
  expect_pass("paged_prefill_gqa", DType::bf16, "q=100x8x96 k_cache=48x16x1x96 cu_seqlens_q=3 block_tables=2x20", {}, 3,
              h);
  // head_dim 256: four sub-tiles, P V 256 wide, key tiles of 80 (several a sequence, a causal edge inside one).
  expect_pass("sdpa", DType::bf16, "q=200x8x256 k=260x2x256 cu_seqlens_q=3 cu_seqlens_k=3 lse=8x200", {}, 3, h);
  expect_pass("sdpa", DType::f16, "q=90x4x256 k=90x4x256 sinks=4", {{"causal", 0}, {"window", 50}, {"softcap", 30.0}},
              3, h);
  expect_pass("paged_prefill_gqa", DType::bf16, "q=100x8x256 k_cache=48x16x1x256 cu_seqlens_q=3 block_tables=2x20", {},
              3, h);
  // Blocks of 32 tokens: key tiles of 64, two boxes each; blocks of 128: a key tile of 64 is part of one.
  expect_pass("paged_prefill_gqa", DType::f16, "q=100x8x256 k_cache=24x32x1x256 cu_seqlens_q=3 block_tables=2x10", {},
              3, h);
  expect_pass("paged_prefill_gqa", DType::bf16, "q=100x8x256 k_cache=4x128x1x256 cu_seqlens_q=3 block_tables=2x2", {},
              3, h);
  // Blocks that TMA boxes cannot tile, gathered: of one token (several key tiles, two KV heads, lse), of 12
  // (head_dim 96, a window, sinks), of one at head_dim 256 (key tiles of 80).
  expect_pass("paged_prefill_gqa", DType::bf16,
              "q=100x8x128 k_cache=300x1x2x128 cu_seqlens_q=3 block_tables=2x150 lse=8x100", {}, 3, h);
  expect_pass("paged_prefill_gqa", DType::f16, "q=150x8x96 k_cache=64x12x1x96 cu_seqlens_q=3 block_tables=2x24 sinks=8",
              {{"window", 40}}, 3, h);
  expect_pass("paged_prefill_gqa", DType::bf16, "q=60x4x256 k_cache=200x1x1x256 cu_seqlens_q=3 block_tables=2x100", {},
              3, h);
  expect_pass("paged_prefill_gqa", DType::f16,
              "q=150x8x128 k_cache=64x32x1x128 cu_seqlens_q=3 block_tables=2x12 sinks=8", {{"window", 40}}, 3, h);
  // Tiles whose keys every query of a consumer's 64 rows sees skip the mask (all_visible): these sit one key
  // past that edge. A causal tile whose last key (127) is one after the consumer's first query (126: 62 keys
  // before 300 queries, 64 rows a consumer): with the edge moved by one, 113 elements fail. A window's tile
  // whose first key (128) is one before the last query's reach (191 - 62): moved by one, that one query sees
  // one key too many among hundreds, which only some data shows (seed 0: 120 elements, the row; seed 3: none).
  expect_pass("sdpa", DType::bf16, "q=300x2x128 k=362x2x128", {}, 3, h);
  expect_pass("sdpa", DType::bf16, "q=600x1x128 k=600x1x128", {{"causal", 0}, {"window", 62}}, 0, h);
  // Query tiles of 192 rows at head_dim 64: three consumers taking turns, each stage released by all three; with
  // a mask and lse, without one (key tiles of 128 all the same) with a cap and sinks, over a gathered paged cache.
  // With a stage's "empty" barrier counting two consumers' releases, not three, the third's keys are overwritten
  // under it: 7145 of the first case's 256,000 elements fail (and `mojo-jit run` at q=500x8x64 k=900x2x64 reports
  // the shared memory that a wgmma reads changing before its wait).
  expect_pass("sdpa", DType::bf16, "q=500x8x64 k=700x2x64 cu_seqlens_q=3 cu_seqlens_k=3 lse=8x500",
              {{"query_tile", 192}}, 3, h);
  expect_pass("sdpa", DType::f16, "q=300x4x64 k=500x1x64 sinks=4",
              {{"causal", 0}, {"softcap", 30.0}, {"query_tile", 192}}, 3, h);
  expect_pass("paged_prefill_gqa", DType::bf16, "q=250x8x64 k_cache=700x1x2x64 cu_seqlens_q=3 block_tables=2x350",
              {{"window", 100}, {"query_tile", 192}}, 3, h);
  // On the CPU device, in an order where a consumer waits on a stage before its producer has issued the
  // stage's copies: they land anyway, as on a GPU (the CPU device left them queued and called it a deadlock).
  test::ScopedEnv schedule("MOJO_JIT_CPU_SCHEDULE", "random:7");
  expect_pass("sdpa", DType::bf16, "q=300x8x128 k=420x2x128 cu_seqlens_q=4 cu_seqlens_k=4", {}, 3, h);
  expect_pass("sdpa", DType::bf16, "q=400x8x64 k=400x2x64", {{"query_tile", 192}}, 3, h);
}

// The sequence-end edge of all_visible: a varlen sequence whose keys end one short of a whole key tile (127 of
// 128, 175 of 176) has a last tile that must be masked, because the key after it is the next sequence's first,
// read by the same copy. That key is made to win every softmax of the first sequence (every query positive, it
// all +1: scores near 11 against about 1), so that if it were seen the first sequence's output would be its V.
// With the edge moved by one (k0 + n <= hi + 1), 8123 of 8192 elements fail at 128 and 8118 at 176.
TEST_P(AttentionGpu, HopperPrefillMasksTheKeyAfterASequencesEnd) {
  Runtime* h = hopper();
  if (h == nullptr) GTEST_SKIP() << "the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)";
  const std::int64_t dim = 128, tokens = 128;
  for (std::int64_t tile : {128, 176}) {
    SCOPED_TRACE(fmt::format("key_tile {}", tile));
    const std::int64_t first = tile - 1, keys = 2 * tile;
    const std::vector<ScalarArg> scalars = {{"causal", 0}, {"key_tile", double(tile)}};
    const OpDef& sdpa = find_op("sdpa");
    const std::string shapes = fmt::format("q={}x1x{} k={}x1x{} cu_seqlens_q=3 cu_seqlens_k=3", tokens, dim, keys, dim);
    const std::vector<TensorSpec> specs = sdpa.specs_from_shapes(DType::bf16, parse_shapes(sdpa, shapes));
    ASSERT_EQ(sdpa.specialize(example(sdpa, DType::bf16, shapes), scalars, Target::parse("sm_90a")).get("bn"), tile);
    std::vector<float> q = test::random_values(std::size_t(tokens * dim), 1),
                       k = test::random_values(std::size_t(keys * dim), 2);
    for (float& x : q) x = std::fabs(x);
    std::fill(k.begin() + first * dim, k.begin() + (first + 1) * dim, 1.f);
    std::vector<std::vector<std::uint8_t>> data = {std::vector<std::uint8_t>(specs[0].nbytes()),
                                                   reference::encode(DType::bf16, q),
                                                   reference::encode(DType::bf16, k),
                                                   random_tensor(DType::bf16, keys * dim, 3),
                                                   test::index_bytes(DType::i32, {0, tokens / 2, tokens}),
                                                   test::index_bytes(DType::i32, {0, first, keys}),
                                                   {},
                                                   {}};
    GpuTensor out(specs[0]), qd(specs[1], data[1]), kd(specs[2], data[2]), vd(specs[3], data[3]),
        cu_q(specs[4], data[4]), cu_k(specs[5], data[5]);
    h->launch("sdpa", {out, qd, kd, vd, cu_q, cu_k, Tensor{}, Tensor{}}, scalars);
    const std::vector<std::uint8_t> got = out.read();
    const OpCheck& check = find_check("sdpa");
    check.reference(specs, data, scalars);
    test::expect_close(DType::bf16, got, data[0], "out", check.tolerance(DType::bf16, specs, scalars));
  }
}

// A plan's kernels are one module: compile() and compile_all() build both steps of a split decode.
TEST(AttentionOp, CompilingAPlanCompilesEveryKernelOfIt) {
  RuntimeOptions o;
  o.disk_cache = false;
  Runtime rt(o);
  const OpDef& op = find_op("paged_decode_gqa");
  const char* shapes = "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512";
  const Artifact a = rt.compile(op.name(), example(op, DType::bf16, shapes), {}, kSm90, Emit::ptx);
  ASSERT_EQ(a.kernels.size(), 2u);
  EXPECT_EQ(a.kernel_name, a.kernels[0]);
  EXPECT_EQ(a.workspace_bytes, 3u * 32 * 32 * 129 * 4);
  for (const std::string& k : a.kernels) EXPECT_NE(a.binary->find(".entry " + k), std::string::npos) << k;
  PrewarmItem item{std::string(op.name()), example(op, DType::bf16, shapes), {}, kSm90, "decode"};
  const std::vector<Bundle> bundles = rt.compile_all({item}, Emit::ptx);
  ASSERT_EQ(bundles.size(), 1u);
  EXPECT_EQ(bundles[0].kernels, a.kernels);
}

// The debug checks read the lengths and tables back and name the bad value.
TEST_P(AttentionGpu, DebugChecksNameABadBlockTableEntryOrLength) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  const TensorSpec q(DType::bf16, {2, 4, 64}), cache(DType::bf16, {8, 16, 1, 64}), table(DType::i32, {2, 2}),
      lens(DType::i32, {2});
  GpuTensor out(q), qd(q, random_tensor(DType::bf16, q.numel(), 1)),
      kc(cache, random_tensor(DType::bf16, cache.numel(), 2)), vc(cache, random_tensor(DType::bf16, cache.numel(), 3)),
      tables(table, test::index_bytes(DType::i32, {0, 1, 2, 9})),
      context(lens, test::index_bytes(DType::i32, {20, 17}));
  const Tensor none{};
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              checked.launch("paged_decode_gqa", {out, qd, kc, vc, tables, context, none, none});
            }),
            "paged_decode_gqa: block_tables[1, 1] = 9 is not a block of the cache [0, 8)");
  GpuTensor long_context(lens, test::index_bytes(DType::i32, {20, 40}));
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              checked.launch("paged_decode_gqa", {out, qd, kc, vc, tables, long_context, none, none});
            }),
            "paged_decode_gqa: context_lens[1] = 40; expected 1 (its new tokens) to 32 (max_blocks x block_size)");
  // Cumulative lengths that end short of the tokens given.
  const TensorSpec sq(DType::bf16, {6, 4, 64}), sk(DType::bf16, {6, 1, 64}), cu(DType::i32, {3});
  GpuTensor so(sq), sqd(sq, random_tensor(DType::bf16, sq.numel(), 4)),
      skd(sk, random_tensor(DType::bf16, sk.numel(), 5)), cus(cu, test::index_bytes(DType::i32, {0, 2, 5}));
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              checked.launch("sdpa", {so, sqd, skd, skd, cus, none, none, none});
            }),
            "sdpa: cu_seqlens_q[2] = 5; cumulative lengths start at 0, never decrease and end at 6 (the tensor's "
            "tokens)");
}

// A split decode is two kernels and a workspace: after its first launch a CUDA graph captures both, and
// replaying the graph gives what the direct launch gave.
TEST_P(AttentionGpu, ASplitPlanIsCapturedInAGraphAfterItsFirstLaunch) {
  const OpDef& op = find_op("paged_decode_gqa");
  const std::vector<TensorSpec> specs =
      op.specs_from_shapes(DType::bf16, parse_shapes(op, "q=4x8x64 k_cache=256x16x2x64 block_tables=4x64 lse=8x4"));
  std::vector<std::unique_ptr<GpuTensor>> buffers;  // null for the absent sinks
  std::vector<Tensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const bool output = i == 0 || i + 1 == specs.size();
    buffers.push_back(specs[i].rank() == 0 ? nullptr
                      : output
                          ? std::make_unique<GpuTensor>(specs[i])
                          : std::make_unique<GpuTensor>(specs[i], find_check(op.name()).random_data(i, specs, {}, 7)));
    tensors.push_back(buffers.back() ? buffers.back()->tensor() : Tensor{specs[i], 0});
  }
  GpuTensor &out = *buffers.front(), &lse = *buffers.back();
  ASSERT_EQ(op.plan(op.specialize(tensors, {}, rt->device().target())).size(), 2u);
  Stream stream;
  rt->launch("paged_decode_gqa", tensors, {}, stream);  // the first launch: loads, and sizes the stream's workspace
  stream.synchronize();
  const std::vector<std::uint8_t> direct = out.read(), direct_lse = lse.read();
  out.poison();
  lse.poison();
  Graph g = Graph::capture(stream, [&] { rt->launch("paged_decode_gqa", tensors, {}, stream); });
  g.launch(stream);
  stream.synchronize();
  EXPECT_EQ(out.read(), direct);
  EXPECT_EQ(lse.read(), direct_lse);
  EXPECT_NE(direct[0], 0xff) << "the launch wrote the output";
}

INSTANTIATE_TEST_SUITE_P(Compilers, AttentionGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
