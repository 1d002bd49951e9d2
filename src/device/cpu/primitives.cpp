// The preludes' primitives on the CPU device, with the PTX ISA's semantics.
// Asynchronous operations complete as late as the ISA allows and poison
// what they will write until then (0xff bytes: NaN in every float type), so
// a missing wait reads garbage: cp.async lands at its wait_group, a TMA box
// when a thread waits on its mbarrier, a wgmma at its wait_group (its
// accumulators hold NaN meanwhile).
#include "device/cpu/primitives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "device/cpu/block.hpp"
#include "core/convert.hpp"

namespace mojo::cpu {

namespace {

Block& block() { return current_block(); }

float half_to_float(unsigned short bits, int type) {
  return type == 2 ? convert::bf16_to_float(bits) : convert::f16_to_float(bits);
}

// The calling thread wrote shared memory at `address` through the generic proxy (`kind`: 0 for a cp.async
// landing, Block::kStoreWrite for a store): unfenced until its fence.proxy.async. A granule it already holds is
// listed once; a thread's list that other threads' writes have made mostly stale is compacted, so that a kernel
// that never fences (it has no wgmma) keeps it as small as its granules.
void note_unfenced(Block& b, unsigned address, std::uint16_t kind) {
  Thread& t = b.self();
  const std::uint16_t me = std::uint16_t(b.tid() + 1);
  std::uint16_t& writer = b.unfenced[(address - Block::kWindowBase) / 16];
  const bool listed = (writer & ~Block::kStoreWrite) == me;
  b.unfenced_count += writer == 0;
  writer = me | kind;
  if (listed) return;
  if (t.unfenced_writes.size() >= b.unfenced.size())
    std::erase_if(t.unfenced_writes,
                  [&](unsigned a) { return (b.unfenced[(a - Block::kWindowBase) / 16] & ~Block::kStoreWrite) != me; });
  t.unfenced_writes.push_back(address);
}

// ---- threads, barriers, shuffles, shared memory ------------------------------------

const mojo_cpu_thread* self() {
  Quiet quiet;
  return &block().self().regs;
}

void barrier(int id, int threads) {
  Quiet quiet;
  block().barrier(id, threads);
}
void barrier_arrive(int id, int threads) {
  Quiet quiet;
  block().barrier(id, threads, false);
}

[[noreturn]] void misaligned(const void* address, unsigned bytes, int store) {
  block().fail(fmt::format("a {}-byte vector {} at {} is not {}-byte aligned (misaligned address)", bytes,
                           store ? "store" : "load", address, bytes));
}

// A spin on a global counter that other blocks advance (mojo::wait_at_least). The thread sleeps until the
// scheduler sees the value (executor.cpp), then loads it again with acquire, so that it reads what the blocks
// wrote before they advanced it (and TSan, whose fibers are the GPU threads, sees that order).
void wait_at_least(const unsigned* counter, unsigned value) {
  while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < value) {
    Quiet quiet;
    Block& b = block();
    if (b.grid == nullptr)
      b.fail(
          fmt::format("waits for other blocks (the counter at {} holds {}; it waits for {}) in a launch that is "
                      "not cooperative: a GPU need not run those blocks while this one waits (a hang); launch "
                      "it with LaunchOptions::cooperative",
                      static_cast<const void*>(counter), __atomic_load_n(counter, __ATOMIC_RELAXED), value));
    b.self().wait_counter = counter;
    b.wait(Wait::counter, "a global counter", 0, value);
  }
}

unsigned shfl_bfly(unsigned value, int lane_mask) {
  Quiet quiet;
  struct Lane {
    unsigned in, out;
    int mask;
  } me{value, 0, lane_mask};
  block().collective(false, "shfl.sync.bfly", &me, [](void** lanes) {
    for (int i = 0; i < 32 && lanes[i] != nullptr; ++i) {
      auto* l = static_cast<Lane*>(lanes[i]);
      const int j = i ^ (l->mask & 31);
      if (lanes[j] == nullptr)
        block().fail(fmt::format("shfl.sync.bfly: lane {} reads lane {}, which the warp does not have", i, j));
      l->out = static_cast<Lane*>(lanes[j])->in;
    }
  });
  return me.out;
}

unsigned char* dynamic_smem() {
  Quiet quiet;
  return block().smem;
}

unsigned smem_address(const void* generic) {
  Quiet quiet;
  Block& b = block();
  const auto* p = static_cast<const unsigned char*>(generic);
  if (p < b.smem || p > b.smem + b.smem_bytes)
    b.fail(
        "cvta.to.shared of an address outside the block's dynamic shared memory (static __shared__ arrays have "
        "no shared-window address on the CPU device)");
  return Block::kWindowBase + unsigned(p - b.smem);
}

const void* param(int index) {
  Quiet quiet;
  Block& b = block();
  const unsigned count = b.launch->kernel->params[0];
  if (index < 0 || unsigned(index) >= count)
    b.fail(fmt::format("the kernel reads parameter {} of its {}", index, count));
  return b.args[index];
}

// ---- cp.async ----------------------------------------------------------------------

void cp_async(unsigned dst, const void* src, int src_bytes) {
  Quiet quiet;
  Block& b = block();
  if (src_bytes < 0 || src_bytes > 16)
    b.fail(fmt::format("cp.async.cg of 16 bytes with src-size {} (0 to 16 allowed)", src_bytes));
  if (src_bytes > 0 && reinterpret_cast<std::uintptr_t>(src) % 16 != 0)  // a zero-fill reads nothing
    b.fail(fmt::format("cp.async.cg of 16 bytes from {}, which is not 16-byte aligned (misaligned address)", src));
  unsigned char* d = b.shared(dst, 16, 16, "cp.async");
  std::memset(d, 0xff, 16);  // lands at its wait_group
  race::write(d, 16);
  b.self().open_copies.push_back({dst, static_cast<const unsigned char*>(src), src_bytes});
}

void cp_async_commit() {
  Quiet quiet;
  Thread& t = block().self();
  t.copy_groups.push_back(std::move(t.open_copies));
  t.open_copies.clear();
}

void cp_async_wait(int pending) {
  Quiet quiet;
  Block& b = block();
  Thread& t = b.self();
  while (int(t.copy_groups.size()) > pending) {
    for (const AsyncCopy& c : t.copy_groups.front()) {
      unsigned char* d = b.shared(c.dst, 16, 16, "cp.async");
      race::read(c.src, std::size_t(c.bytes));
      race::write(d, 16);
      if (c.bytes > 0) std::memcpy(d, c.src, std::size_t(c.bytes));
      std::memset(d + c.bytes, 0, std::size_t(16 - c.bytes));
      note_unfenced(b, c.dst, 0);
    }
    t.copy_groups.pop_front();
  }
}

// Its writes to shared memory (cp.async landed, stores) made visible to the async proxy.
void fence_proxy_async() {
  Quiet quiet;
  Block& b = block();
  Thread& t = b.self();
  for (unsigned address : t.unfenced_writes) {
    std::uint16_t& writer = b.unfenced[(address - Block::kWindowBase) / 16];
    if ((writer & ~Block::kStoreWrite) == b.tid() + 1) writer = 0, --b.unfenced_count;
  }
  t.unfenced_writes.clear();
}

void shared_store(const void* generic, unsigned /*bytes: at most 16, aligned, so within one granule*/) {
  Quiet quiet;
  Block& b = block();
  const auto* p = static_cast<const unsigned char*>(generic);
  if (p >= b.smem && p < b.smem + b.smem_bytes)
    note_unfenced(b, Block::kWindowBase + unsigned(p - b.smem), Block::kStoreWrite);
}

// ---- ldmatrix and mma.sync ------------------------------------------------------------

void ldmatrix_x4(unsigned* r, unsigned address, int trans) {
  Quiet quiet;
  struct Lane {
    unsigned address;
    unsigned* r;
  } me{address, r};
  auto complete = [trans](void** lanes) {
    // Lane i gives the address of row i % 8 of matrix i / 8: eight 16-bit elements.
    const unsigned char* rows[32];
    for (int i = 0; i < 32; ++i) {
      rows[i] = block().shared(static_cast<Lane*>(lanes[i])->address, 16, 16, "ldmatrix");
      race::read(rows[i], 16);
    }
    auto element = [&](int matrix, int row, int col) {
      std::uint16_t v;
      std::memcpy(&v, rows[matrix * 8 + row] + 2 * col, 2);
      return unsigned(v);
    };
    for (int l = 0; l < 32; ++l) {
      auto* lane = static_cast<Lane*>(lanes[l]);
      for (int m = 0; m < 4; ++m) {
        // Lane l holds row l / 4, columns 2 (l % 4) + {0, 1}; .trans: of the transposed matrix.
        const int a = l / 4, b = 2 * (l % 4);
        lane->r[m] =
            trans ? element(m, b, a) | element(m, b + 1, a) << 16 : element(m, a, b) | element(m, a, b + 1) << 16;
      }
    }
  };
  if (block().lanes_of(false, block().tid() / 32) != 32) block().fail("ldmatrix needs a whole warp");
  block().collective(false, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", &me, complete);
}

void mma(float* d, const unsigned* a, const unsigned* b, int type) {
  Quiet quiet;
  struct Lane {
    float* d;
    const unsigned* a;
    const unsigned* b;
  } me{d, a, b};
  static const char* const names[] = {"mma.sync.m16n8k8.tf32", "mma.sync.m16n8k16.f16", "mma.sync.m16n8k16.bf16"};
  auto complete = [type](void** lanes) {
    const int K = type == 0 ? 8 : 16;
    float A[16][16], B[16][8], C[16][8];
    auto lo = [&](unsigned v) { return half_to_float(std::uint16_t(v & 0xffff), type); };
    auto hi = [&](unsigned v) { return half_to_float(std::uint16_t(v >> 16), type); };
    auto tf32 = [](unsigned v) {
      float f;
      v &= 0xffffe000u;  // the tensor cores read 10 mantissa bits
      std::memcpy(&f, &v, 4);
      return f;
    };
    for (int l = 0; l < 32; ++l) {
      const auto* lane = static_cast<Lane*>(lanes[l]);
      const int g = l / 4, t = l % 4;
      if (type == 0) {
        // m16n8k8 tf32: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (k t, n g), b1 (k t + 4).
        A[g][t] = tf32(lane->a[0]), A[g + 8][t] = tf32(lane->a[1]);
        A[g][t + 4] = tf32(lane->a[2]), A[g + 8][t + 4] = tf32(lane->a[3]);
        B[t][g] = tf32(lane->b[0]), B[t + 4][g] = tf32(lane->b[1]);
      } else {
        // m16n8k16: a0 (g, 2t..), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..); b0 (k 2t.., n g), b1 (k 2t
        // + 8..).
        for (int h = 0; h < 2; ++h) {
          const int row = g + 8 * h;
          A[row][2 * t] = lo(lane->a[h]), A[row][2 * t + 1] = hi(lane->a[h]);
          A[row][2 * t + 8] = lo(lane->a[2 + h]), A[row][2 * t + 9] = hi(lane->a[2 + h]);
          B[2 * t + 8 * h][g] = lo(lane->b[h]), B[2 * t + 8 * h + 1][g] = hi(lane->b[h]);
        }
      }
      // c0, c1 at (g, 2t..), c2, c3 at (g + 8, 2t..).
      C[g][2 * t] = lane->d[0], C[g][2 * t + 1] = lane->d[1];
      C[g + 8][2 * t] = lane->d[2], C[g + 8][2 * t + 1] = lane->d[3];
    }
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        float acc = C[i][j];
        for (int k = 0; k < K; ++k) acc = std::fma(A[i][k], B[k][j], acc);
        C[i][j] = acc;
      }
    for (int l = 0; l < 32; ++l) {
      float* out = static_cast<Lane*>(lanes[l])->d;
      const int g = l / 4, t = l % 4;
      out[0] = C[g][2 * t], out[1] = C[g][2 * t + 1], out[2] = C[g + 8][2 * t], out[3] = C[g + 8][2 * t + 1];
    }
  };
  if (type < 0 || type > 2) block().fail(fmt::format("mma.sync of unknown type {}", type));
  if (block().lanes_of(false, block().tid() / 32) != 32) block().fail("mma.sync needs a whole warp");
  block().collective(false, names[type], &me, complete);
}

// ---- mbarriers and TMA -------------------------------------------------------------------

void mbarrier_init(unsigned bar, unsigned arrivals) {
  Quiet quiet;
  Block& b = block();
  std::memset(b.shared(bar, 8, 8, "mbarrier.init"), 0, 8);
  if (arrivals == 0 || arrivals >= (1u << 20))
    b.fail(fmt::format("mbarrier.init with {} arrivals (1 to 2^20 - 1 allowed)", arrivals));
  for (const Mbarrier& m : b.mbarriers)
    if (m.address == bar) b.fail(fmt::format("mbarrier.init on 0x{:x}, which already holds an mbarrier", bar));
  b.mbarriers.push_back(Mbarrier{bar, arrivals, arrivals, 0, 0, {}});
}

// TSan's synchronisation object of an mbarrier's phase: the mbarrier's own bytes.
const void* phase_sync(Block& b, const Mbarrier& m, unsigned phase) {
  return race::phase_sync(b.smem + (m.address - Block::kWindowBase), phase);
}

// The threads waiting on the mbarrier at `bar` go on (and look at it again).
void wake_waiters(Block& b, unsigned bar) {
  for (Thread& t : b.threads)
    if (t.state == Thread::waiting && t.wait == Wait::mbarrier && t.wait_id == bar) b.wake(t);
}

// Completes the phase when every arrival and every announced byte is in.
void try_complete(Block& b, Mbarrier& m) {
  if (m.pending != 0) return;
  if (m.tx < 0)
    b.fail(fmt::format("mbarrier 0x{:x}: {} more bytes completed than expect_tx announced in phase {}", m.address,
                       -m.tx, m.phase));
  if (m.tx > 0) return;
  ++m.phase;
  m.pending = m.expected;
  wake_waiters(b, m.address);
}

void mbarrier_arrive(unsigned bar, unsigned expect_tx_bytes) {
  Quiet quiet;
  Block& b = block();
  Mbarrier& m = b.mbarrier(bar, "mbarrier.arrive");
  if (m.pending == 0)
    b.fail(fmt::format("mbarrier 0x{:x}: more arrivals than its {} in phase {}", bar, m.expected, m.phase));
  m.tx += expect_tx_bytes;
  --m.pending;
  const unsigned phase = m.phase;
  race::release(phase_sync(b, m, phase));
  try_complete(b, m);
  // A released thread runs before the releasing one goes on, as it may on a GPU: an arrive that comes
  // too early (a stage freed while its MMAs still read it) then meets the copies that overwrite it.
  if (m.phase != phase) b.yield();
}

unsigned swizzle(unsigned address, unsigned swizzle_bytes) {
  // 16-byte chunks within a 128-byte row XORed with the row within 8 (128B), 4 (64B) or 2 (32B) rows.
  const unsigned rows = swizzle_bytes / 16;
  return swizzle_bytes == 0 ? address : address ^ (((address >> 7) & (rows - 1)) << 4);
}

unsigned box_bytes(const TensorMapRecord& map) { return map.box[0] * map.box[1] * map.box[2] * map.element_bytes; }

void perform(Block& b, const TmaCopy& c) {
  const TensorMapRecord& map = c.map;
  const unsigned e = map.element_bytes;
  const auto* base = reinterpret_cast<const unsigned char*>(map.base);
  unsigned offset = 0;
  for (unsigned z = 0; z < map.box[2]; ++z)
    for (unsigned y = 0; y < map.box[1]; ++y)
      for (unsigned x = 0; x < map.box[0]; ++x, offset += e) {
        const long long g[3] = {(long long)c.c[0] + x, (long long)c.c[1] + y, (long long)c.c[2] + z};
        unsigned char* dst = b.smem + (swizzle(c.dst + offset, map.swizzle_bytes) - Block::kWindowBase);
        const bool inside = g[0] >= 0 && g[1] >= 0 && g[2] >= 0 && std::uint64_t(g[0]) < map.dims[0] &&
                            std::uint64_t(g[1]) < map.dims[1] && std::uint64_t(g[2]) < map.dims[2];
        if (inside)
          std::memcpy(dst, base + g[2] * (long long)map.strides[1] + g[1] * (long long)map.strides[0] + g[0] * e, e);
        else
          std::memset(dst, 0, e);  // FLOAT_OOB_FILL_NONE: zeros
      }
}

void tma_load_3d(unsigned dst, const void* map_address, unsigned bar, int c0, int c1, int c2) {
  Quiet quiet;
  Block& b = block();
  TmaCopy c{dst, {}, {c0, c1, c2}};
  std::memcpy(&c.map, map_address, sizeof c.map);
  if (c.map.magic != kTensorMapMagic)
    b.fail("cp.async.bulk.tensor with a tensor map the CPU device did not encode (tile_tensor_map on another device?)");
  const unsigned bytes = box_bytes(c.map);
  // The swizzle pattern repeats every 8 rows of 128 bytes, from an aligned start.
  const unsigned align = c.map.swizzle_bytes != 0 ? c.map.swizzle_bytes * 8 : 128;
  unsigned char* d = b.shared(dst, bytes, align, "cp.async.bulk.tensor");
  std::memset(d, 0xff, bytes);  // lands when waited for
  Mbarrier& m = b.mbarrier(bar, "cp.async.bulk.tensor");
  m.copies.push_back(c);
  // TSan: the box is written now, by the issuing thread, and its completion is the phase's.
  race::write(d, bytes);
  race::release(phase_sync(b, m, m.phase));
  // A thread already waiting on the mbarrier lands the copy (mbarrier_wait): on a GPU it lands whatever the
  // thread that issued it does next, exiting included. Left queued, a consumer that waited before its
  // producer arrived slept on after the producer was done (a deadlock the schedule alone decided).
  wake_waiters(b, bar);
}

void mbarrier_wait(unsigned bar, unsigned parity) {
  Quiet quiet;
  Block& b = block();
  for (;;) {
    Mbarrier& m = b.mbarrier(bar, "mbarrier.try_wait");
    // Parity P is done when the phase with that parity completed: the current (incomplete) phase has the other parity.
    if ((m.phase & 1u) != (parity & 1u)) {
      race::acquire(phase_sync(b, m, parity));
      return;
    }
    if (!m.copies.empty()) {  // a thread waits: the copies it waits for land now, as late as possible
      const std::vector<TmaCopy> copies = std::move(m.copies);
      m.copies.clear();
      for (const TmaCopy& c : copies) {
        perform(b, c);
        m.tx -= box_bytes(c.map);
      }
      try_complete(b, m);
      continue;
    }
    b.wait(Wait::mbarrier, nullptr, bar, parity);
  }
}

// ---- wgmma ----------------------------------------------------------------------------------

struct WgmmaLane {
  float* d;
  int n, scale_d, mn_major_a, mn_major_b, type;
  unsigned long long a_desc, b_desc;
  const unsigned* a_regs;  // A from registers (4 a thread), or null
};

// The shared address of element (mn, k) of an operand tile, k < 16, as its descriptor gives it: 128-byte
// swizzled, K-major (rows of 64 k along M/N, 8-row atoms the stride offset apart) or MN-major (rows of 64 m/n
// along K, 8-row atoms the stride offset apart, the next 64 m/n the leading offset further).
unsigned operand_address(unsigned long long desc, int mn, int k, bool mn_major) {
  const unsigned start = unsigned(desc & 0x3fff) << 4, lbo = unsigned((desc >> 16) & 0x3fff) << 4;
  const unsigned sbo = unsigned((desc >> 32) & 0x3fff) << 4;
  return swizzle(mn_major ? start + (mn % 64) * 2 + (mn / 64) * lbo + (k % 8) * 128 + (k / 8) * sbo
                          : start + (mn % 8) * 128 + (mn / 8) * sbo + 2 * k,
                 128);
}

float operand(Block& b, unsigned long long desc, int mn, int k, bool mn_major, int type, bool issue) {
  std::uint16_t v;
  const unsigned char* p = b.shared(operand_address(desc, mn, k, mn_major), 2, 2, "wgmma operand");
  if (issue) race::read(p, 2);  // the MMA reads its operands at issue (the wait only checks them)
  std::memcpy(&v, p, 2);
  return half_to_float(v, type);
}

// A wgmma's operands in shared memory: inside the block's, and none of their bytes a thread's cp.async or store
// that no fence.proxy.async of that thread followed (the async proxy may not see them). Before the MMA allocates
// anything: a failed launch leaves the thread's stack as it is.
void check_operands(Block& b, const WgmmaLane& l) {
  auto check = [&](unsigned long long desc, int rows, bool mn_major) {
    for (int mn = 0; mn < rows; ++mn)
      for (int k = 0; k < 16; ++k) {
        const unsigned address = operand_address(desc, mn, k, mn_major);
        b.shared(address, 2, 2, "wgmma operand");
        if (const unsigned writer = b.unfenced[(address - Block::kWindowBase) / 16]; writer != 0)
          b.fail(fmt::format(
              "wgmma.mma_async reads shared memory at 0x{:x}, which thread {}'s {} wrote with no fence.proxy.async "
              "after it (the async proxy may not see it)",
              address, (writer & ~Block::kStoreWrite) - 1, writer & Block::kStoreWrite ? "store" : "cp.async"));
      }
  };
  if (l.a_regs == nullptr) check(l.a_desc, 64, l.mn_major_a != 0);
  check(l.b_desc, l.n, l.mn_major_b != 0);
}

void check_descriptor(Block& b, unsigned long long desc, const char* which) {
  if ((desc >> 62) != 1)
    b.fail(
        fmt::format("wgmma {} descriptor 0x{:x}: swizzle mode {}; the CPU device emulates mode 1 (128-byte), the "
                    "one TMA writes here",
                    which, desc, desc >> 62));
  if (((desc >> 49) & 7) != 0) b.fail(fmt::format("wgmma {} descriptor 0x{:x}: base offset is not 0", which, desc));
}

// A (64 x 16) then B (n x 16), as the descriptors read them now (`issue`: by the wgmma itself); A from the
// registers it took at issue, where it took it so.
std::vector<float> gather(Block& b, const WgmmaOp& op, bool issue) {
  std::vector<float> v(std::size_t(64 + op.n) * 16);
  if (!op.a_registers.empty())
    std::copy(op.a_registers.begin(), op.a_registers.end(), v.begin());
  else
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k)
        v[std::size_t(m * 16 + k)] = operand(b, op.a_desc, m, k, op.mn_major_a, op.type, issue);
  for (int n = 0; n < op.n; ++n)
    for (int k = 0; k < 16; ++k)
      v[std::size_t((64 + n) * 16 + k)] = operand(b, op.b_desc, n, k, op.mn_major_b, op.type, issue);
  return v;
}

Warpgroup& my_warpgroup(Block& b) { return b.wgmma[std::size_t(b.tid() / 128)]; }

void wgmma_fence() {
  Quiet quiet;
  block().collective(true, "wgmma.fence", nullptr, [](void**) { my_warpgroup(block()).fenced = true; });
}

// A 64 x 16 operand from the warpgroup's registers: thread t's register r, half h (low first) is element (row
// 16 (t / 32) + (t % 32) / 4 + 8 (r % 2), k 2 (t % 4) + h + 8 (r / 2)), as the PTX ISA lays out wgmma's A.
std::vector<float> registers_operand(void** lanes, int type) {
  std::vector<float> a(64 * 16);
  for (int t = 0; t < 128; ++t) {
    const unsigned* regs = static_cast<WgmmaLane*>(lanes[t])->a_regs;
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (r % 2), k = 2 * (t % 4) + h + 8 * (r / 2);
        a[std::size_t(row * 16 + k)] = half_to_float(std::uint16_t(regs[r] >> (16 * h)), type);
      }
  }
  return a;
}

void wgmma(float* d, int n, unsigned long long a_desc, const unsigned* a_regs, unsigned long long b_desc,
           int scale_d, int mn_major_a, int mn_major_b, int type) {
  Quiet quiet;
  WgmmaLane me{d, n, scale_d, mn_major_a, mn_major_b, type, a_desc, b_desc, a_regs};
  if (block().lanes_of(true, block().tid() / 128) != 128) block().fail("wgmma needs a whole warpgroup (128 threads)");
  block().collective(true, "wgmma.mma_async", &me, [](void** lanes) {
    Block& b = block();
    Warpgroup& wg = my_warpgroup(b);
    const auto& first = *static_cast<WgmmaLane*>(lanes[0]);
    for (int t = 1; t < 128; ++t) {
      const auto& l = *static_cast<WgmmaLane*>(lanes[t]);
      if (l.n != first.n || l.a_desc != first.a_desc || l.b_desc != first.b_desc || l.scale_d != first.scale_d ||
          l.mn_major_a != first.mn_major_a || l.mn_major_b != first.mn_major_b || l.type != first.type ||
          (l.a_regs == nullptr) != (first.a_regs == nullptr))
        b.fail(
            fmt::format("wgmma.mma_async: thread {} of the warpgroup gives other operands than thread 0 (descriptors "
                        "0x{:x}, 0x{:x} vs 0x{:x}, 0x{:x})",
                        t, l.a_desc, l.b_desc, first.a_desc, first.b_desc));
    }
    if (!wg.fenced) b.fail("wgmma.mma_async without a wgmma.fence since the warpgroup last touched its accumulators");
    if (first.a_regs == nullptr) check_descriptor(b, first.a_desc, "A");
    check_descriptor(b, first.b_desc, "B");
    if (b.unfenced_count > 0) check_operands(b, first);
    WgmmaOp op{first.a_desc, first.b_desc, first.n, first.scale_d, first.mn_major_a, first.mn_major_b,
               first.type,   {},           {},      {}};
    if (first.a_regs != nullptr) op.a_registers = registers_operand(lanes, first.type);
    for (int t = 0; t < 128; ++t) op.d[t] = static_cast<WgmmaLane*>(lanes[t])->d;
    op.operands = gather(b, op, true);
    // The accumulators now belong to the MMA: their values move here, the registers read NaN until the wait.
    Warpgroup::InFlight* f = nullptr;
    for (auto& x : wg.in_flight)
      if (x.d0 == op.d[0]) f = &x;
    if (f == nullptr) {
      const int per = op.n / 2;
      wg.in_flight.push_back({op.d[0], std::vector<float>(std::size_t(128 * per)), 0});
      f = &wg.in_flight.back();
      for (int t = 0; t < 128; ++t)
        for (int i = 0; i < per; ++i) {
          f->values[std::size_t(t * per + i)] = op.d[t][i];
          op.d[t][i] = std::numeric_limits<float>::quiet_NaN();
        }
    }
    ++f->ops;
    wg.open.push_back(std::move(op));
  });
}

void wgmma_commit() {
  Quiet quiet;
  block().collective(true, "wgmma.commit_group", nullptr, [](void**) {
    Warpgroup& wg = my_warpgroup(block());
    wg.groups.push_back(std::move(wg.open));
    wg.open.clear();
  });
}

// Bit for bit: operands may hold NaN (rows past a group's end, computed and never stored), which == calls changed.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void complete(Block& b, Warpgroup& wg, const WgmmaOp& op) {
  // The gathered copy is a temporary, gone before fail() leaves this fiber for good.
  if (!same_bits(gather(b, op, false), op.operands))
    b.fail(
        "the shared memory a wgmma.mma_async reads changed before its wgmma.wait_group (a stage released or "
        "overwritten while the MMA was in flight)");
  auto f = wg.in_flight.begin();
  while (f->d0 != op.d[0]) ++f;
  const int per = op.n / 2;
  const float* a = op.operands.data();
  const float* bm = a + 64 * 16;
  for (int t = 0; t < 128; ++t)
    for (int j = 0; j < op.n / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        // Thread t holds d[4j + e] at row 16 (t / 32) + (t % 32) / 4 + 8 (e / 2), column 8j + 2 (t % 4) + e % 2.
        const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (e / 2), col = 8 * j + 2 * (t % 4) + e % 2;
        float& acc = f->values[std::size_t(t * per + 4 * j + e)];
        float sum = op.scale_d ? acc : 0.f;
        for (int k = 0; k < 16; ++k) sum = std::fma(a[row * 16 + k], bm[col * 16 + k], sum);
        acc = sum;
      }
  if (--f->ops == 0) {
    for (int t = 0; t < 128; ++t)
      std::memcpy(op.d[t], &f->values[std::size_t(t * per)], sizeof(float) * std::size_t(per));
    wg.in_flight.erase(f);
  }
}

void wgmma_wait(int pending) {
  Quiet quiet;
  block().collective(true, "wgmma.wait_group", &pending, [](void** lanes) {
    Block& b = block();
    Warpgroup& wg = my_warpgroup(b);
    const int keep = *static_cast<int*>(lanes[0]);
    while (int(wg.groups.size()) > keep) {
      for (const WgmmaOp& op : wg.groups.front()) complete(b, wg, op);
      wg.groups.pop_front();
    }
    wg.fenced = false;
  });
}

}  // namespace

const mojo_cpu_api& api_table() {
  static const mojo_cpu_api table{MOJO_CPU_ABI_VERSION, self,        barrier,       shfl_bfly,         dynamic_smem,
                                  smem_address,         param,       cp_async,      cp_async_commit,   cp_async_wait,
                                  ldmatrix_x4,          mma,         mbarrier_init, mbarrier_arrive,   mbarrier_wait,
                                  tma_load_3d,          wgmma_fence, wgmma,         wgmma_commit,      wgmma_wait,
                                  barrier_arrive,       misaligned,  wait_at_least, fence_proxy_async, shared_store};
  return table;
}

}  // namespace mojo::cpu
