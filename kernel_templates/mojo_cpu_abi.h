// mojo_cpu_abi.h: the calls a kernel built for the CPU device makes into the
// emulator (src/device/cpu/). Plain C++: the host build of every kernel and
// the library both include it, so the two sides agree on one table. The
// emulator fills the table and hands it to each kernel library it loads.
#pragma once

#define MOJO_CPU_ABI_VERSION 7

extern "C" {

// The special registers of the calling GPU thread.
struct mojo_cpu_thread {
  unsigned tid, ntid;                  // %tid.x, %ntid.x
  unsigned ctaid[3], nctaid[3];        // %ctaid.{x,y,z}, %nctaid.{x,y,z}
};

// Every primitive the preludes use, with the PTX ISA's semantics. Shared
// memory is addressed through the 32-bit shared window, as on the GPU.
struct mojo_cpu_api {
  unsigned version;  // MOJO_CPU_ABI_VERSION
  const mojo_cpu_thread* (*self)();
  // bar.sync id[, threads]; threads 0: every thread of the block that has not exited.
  void (*barrier)(int id, int threads);
  // shfl.sync.bfly.b32 with a full mask and clamp 0x1f.
  unsigned (*shfl_bfly)(unsigned value, int lane_mask);
  unsigned char* (*dynamic_smem)();
  unsigned (*smem_address)(const void* generic);
  // The address of kernel parameter `index` where the launch keeps it (param space).
  const void* (*param)(int index);
  // sm_80: cp.async.cg 16 bytes (src_bytes read, the rest zero-filled), its groups, ldmatrix, mma.sync.
  void (*cp_async)(unsigned dst, const void* src, int src_bytes);
  void (*cp_async_commit)();
  void (*cp_async_wait)(int pending);
  void (*ldmatrix_x4)(unsigned* r, unsigned address, int trans);
  // type: 0 tf32 (m16n8k8), 1 f16, 2 bf16 (m16n8k16); d += a * b.
  void (*mma)(float* d, const unsigned* a, const unsigned* b, int type);
  // sm_90a: mbarriers, TMA, wgmma.
  void (*mbarrier_init)(unsigned bar, unsigned arrivals);
  void (*mbarrier_arrive)(unsigned bar, unsigned expect_tx_bytes);
  void (*mbarrier_wait)(unsigned bar, unsigned parity);
  void (*tma_load_3d)(unsigned dst, const void* map, unsigned bar, int c0, int c1, int c2);
  void (*wgmma_fence)();
  // d (64 x n fp32, n / 2 per thread) (+)= a * b; type 1 f16, 2 bf16. a from shared memory through a_desc, or,
  // where a_regs is not null, from the thread's 4 registers (a_desc and mn_major_a then unused).
  void (*wgmma)(float* d, int n, unsigned long long a_desc, const unsigned* a_regs, unsigned long long b_desc,
                int scale_d, int mn_major_a, int mn_major_b, int type);
  void (*wgmma_commit)();
  void (*wgmma_wait)(int pending);
  // bar.arrive id, threads: counts the calling thread at barrier `id` and goes on (bar.sync's waiters are
  // released when `threads` have arrived or synced).
  void (*barrier_arrive)(int id, int threads);
  // A vector access of `bytes` at `address`, which is not a multiple of them: fails the launch, as the GPU's
  // misaligned-address error does (an x86 aligned move would crash the process instead).
  void (*misaligned)(const void* address, unsigned bytes, int store);
  // Returns once *counter >= value (an acquire load), meanwhile letting the grid's other blocks run: a wait
  // for other blocks, allowed in a cooperative launch only (it fails the launch in any other).
  void (*wait_at_least)(const unsigned* counter, unsigned value);
  // fence.proxy.async.shared::cta: the calling thread's writes to shared memory are seen by the async proxy (a
  // wgmma reading what the thread's cp.async or stores wrote needs it; the emulator checks that).
  void (*fence_proxy_async)();
  // A vector store (mojo::store) of `bytes` at `generic`, before it is made: where it falls in the block's
  // shared memory, the async proxy may not see it until the thread's fence.proxy.async.
  void (*shared_store)(const void* generic, unsigned bytes);
};

}  // extern "C"
