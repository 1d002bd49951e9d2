// The state of one thread block while the CPU device runs it: its threads
// (fibers), shared memory, barriers, warp and warpgroup rendezvous, and the
// asynchronous operations in flight (cp.async groups, mbarriers with their
// TMA copies, wgmma groups). One OS thread runs one block at a time; the
// primitives (primitives.cpp) reach it through `current_block()`.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../../../kernel_templates/mojo_cpu_abi.h"
#include "device/cpu/executor.hpp"
#include "device/cpu/fiber.hpp"
#include "device/cpu/race.hpp"

namespace mojo::cpu {

// Where a waiting thread waits (for the deadlock report).
enum class Wait : std::uint8_t { none, barrier, warp, warpgroup, mbarrier, counter };

class Block;

// The blocks of a cooperative launch, each on an OS thread of its own: a block whose threads all wait, some
// for a global counter (mojo::wait_at_least) that other blocks advance, stalls here until one of those values
// is reached; when every unfinished block is stalled so and none can go on, the grid has deadlocked.
class GridSync {
 public:
  explicit GridSync(int blocks) : unfinished_(blocks) {}
  // Returns once a counter that a thread of `b` waits for has reached its value; throws DeviceError when
  // the grid deadlocked (naming every stalled block's waits), GridAborted when another block failed.
  void stall(Block& b);
  void finished();  // a block ended
  void abort();     // a block failed: the others stop
  struct GridAborted {};

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int unfinished_;
  std::vector<Block*> stalled_;
  bool aborted_ = false;
};

struct AsyncCopy {  // cp.async: 16 bytes, the first `bytes` from src, zeros after
  unsigned dst;
  const unsigned char* src;
  int bytes;
};

struct Thread {
  mojo_cpu_thread regs{};
  Fiber* fiber = nullptr;  // from the OS thread's pool
  enum { runnable, waiting, exited } state = runnable;
  Wait wait = Wait::none;
  const char* wait_what = nullptr;                 // the collective's name
  unsigned wait_id = 0, wait_arg = 0;              // barrier id and count, mbarrier address and parity, or
                                                   // the value a counter must reach
  const unsigned* wait_counter = nullptr;          // the global counter waited for (Wait::counter)
  int quiet = 0;                                   // Quiet scopes open (race.hpp)
  std::vector<AsyncCopy> open_copies;              // since the last commit
  std::deque<std::vector<AsyncCopy>> copy_groups;  // committed, oldest first
  std::vector<unsigned> unfenced_writes;           // its writes to shared memory since its last fence.proxy.async

  bool waits_for_counter() const { return state == waiting && wait == Wait::counter; }
  // Whether the counter it waits for has reached the value (another block's thread may advance it meanwhile).
  bool counter_reached() const {
    return waits_for_counter() && __atomic_load_n(wait_counter, __ATOMIC_RELAXED) >= wait_arg;
  }
};

// A rendezvous of the lanes of one warp (32) or warpgroup (128).
struct Rendezvous {
  int arrived = 0;
  unsigned phase = 0;  // completed rounds
  const char* what = nullptr;
  void* lanes[128] = {};
};

struct TmaCopy {
  unsigned dst;
  TensorMapRecord map;
  int c[3];
};

struct Mbarrier {
  unsigned address = 0;
  unsigned expected = 0, pending = 0;
  long long tx = 0;             // bytes announced by expect_tx not yet completed
  unsigned phase = 0;           // completed phases
  std::vector<TmaCopy> copies;  // issued, completing their bytes when someone waits
};

struct WgmmaOp {
  unsigned long long a_desc, b_desc;
  int n, scale_d, mn_major_a, mn_major_b, type;
  float* d[128];                // each thread's accumulator
  std::vector<float> operands;  // A (64 x 16) then B (n x 16) as read at issue
  std::vector<float> a_registers;  // A (64 x 16) from the threads' registers at issue; empty: A is in shared memory
};

struct Warpgroup {
  bool fenced = false;                      // wgmma.fence since the last wait
  std::vector<WgmmaOp> open;                // since the last commit
  std::deque<std::vector<WgmmaOp>> groups;  // committed, oldest first
  // Accumulators owned by MMAs in flight: their values (128 x n/2) while the
  // threads' own registers hold NaN until the wait that completes them.
  struct InFlight {
    float* d0;  // thread 0's accumulator: identifies the set
    std::vector<float> values;
    int ops;  // MMAs in flight on it
  };
  std::vector<InFlight> in_flight;
};

class Block {
 public:
  // The shared window address of the dynamic shared memory: 128-aligned as
  // declared, deliberately not 1024-aligned (kernels align what needs it).
  static constexpr unsigned kWindowBase = 0x480;

  const Launch* launch = nullptr;
  void** args = nullptr;
  Dim3 index;                // blockIdx
  GridSync* grid = nullptr;  // a cooperative launch's; null in any other
  std::vector<Thread> threads;
  int live = 0;
  unsigned char* smem = nullptr;  // the host address of window address kWindowBase
  unsigned smem_bytes = 0;
  struct Barrier {
    int arrived = 0, threads = 0;
    unsigned phase = 0;  // completed rounds
  } barriers[16];
  std::vector<Rendezvous> warps, warpgroups;
  std::vector<int> exited_in_warp;
  std::vector<Mbarrier> mbarriers;
  // Per 16 bytes of shared memory: 1 + the thread whose write (a cp.async landing, or a store; kStoreWrite set
  // for a store) is there and has not passed a fence.proxy.async since, or 0. The async proxy (wgmma) may not
  // see such bytes.
  static constexpr std::uint16_t kStoreWrite = 0x8000;
  std::vector<std::uint16_t> unfenced;
  int unfenced_count = 0;  // its entries that are not 0
  std::vector<Warpgroup> wgmma;
  int current = -1;
  std::string error;  // the first failure; the block stops
  // TSan: the scheduler releases start before the threads run, and each thread releases end when it stops.
  char start_sync = 0, end_sync = 0;

  Thread& self() { return threads[std::size_t(current)]; }
  int tid() const { return current; }

  // Suspends the calling thread until another wakes it.
  void wait(Wait why, const char* what = nullptr, unsigned id = 0, unsigned arg = 0);
  // After a failure or deadlock stops the block: each thread still waiting inside a primitive closes its Quiet
  // scopes and stops, so that no fiber keeps TSan's ignore into its next start (or its end, on an OS thread
  // that a cooperative launch started).
  void abandon();
  bool abandoning = false;
  void wake(Thread& t) { t.state = Thread::runnable, t.wait = Wait::none; }
  // Wakes the threads whose counter has reached the value they wait for.
  void wake_counter_waits();
  // Whether a thread waits for a counter that has reached its value.
  bool counter_wait_holds() const;
  // Lets the others run before the calling thread goes on (it stays runnable).
  void yield() { suspend_in_primitive(); }
  // Back to the scheduler from inside a primitive (a Quiet scope open), whose thread goes on when resumed,
  // or stops there if the block is abandoned meanwhile.
  void suspend_in_primitive();
  // Records the failure (the first one wins) and stops the calling thread for good.
  [[noreturn]] void fail(std::string message);

  // The host address of `bytes` of shared memory at window address `address`;
  // fails unless they lie inside the block's shared memory and are `align`-aligned.
  unsigned char* shared(unsigned address, unsigned bytes, unsigned align, const char* what);

  // The lanes of the caller's warp (or warpgroup) each arrive with `mine`;
  // the last one runs complete(lanes) (lanes[i]: lane i's `mine`) and
  // releases the others. Every lane must reach the same collective.
  template <class F>
  void collective(bool warpgroup, const char* what, void* mine, F&& complete);

  void barrier(int id, int threads, bool wait_for_it = true);  // bar.sync; bar.arrive where !wait_for_it
  void exit_thread();  // the calling thread returned from the kernel
  Mbarrier& mbarrier(unsigned address, const char* what);

  // Thread `t` of a warp collective and how many lanes its warp has.
  int lanes_of(bool warpgroup, int group) const;
};

// The block the calling OS thread is running.
Block& current_block();

// Keeps the emulator's own bookkeeping, shared by every thread of the block,
// out of TSan's sight while a primitive runs (race.hpp). Counted per thread,
// so that a thread that fails closes the scopes it leaves open.
class Quiet {
 public:
  Quiet() {
    race::quiet_begin();
    ++current_block().self().quiet;
  }
  ~Quiet() {
    --current_block().self().quiet;
    race::quiet_end();
  }
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;
};

template <class F>
void Block::collective(bool warpgroup, const char* what, void* mine, F&& complete) {
  const int size = warpgroup ? 128 : 32, group = current / size, lane = current % size;
  Rendezvous& r = warpgroup ? warpgroups[std::size_t(group)] : warps[std::size_t(group)];
  for (int w = group * size / 32; w < (group + 1) * size / 32 && w < int(exited_in_warp.size()); ++w)
    if (exited_in_warp[std::size_t(w)] > 0)
      fail(std::string(what) + " by thread " + std::to_string(current) + " after threads of its " +
           (warpgroup ? "warpgroup" : "warp") + " exited (a .sync.aligned collective needs all of them)");
  if (r.arrived > 0 && r.what != what)
    fail("thread " + std::to_string(current) + " reached " + what + " while its " + (warpgroup ? "warpgroup" : "warp") +
         " waits at " + r.what + " (every lane must execute the same collective)");
  r.what = what;
  r.lanes[lane] = mine;
  // The lanes of a collective are ordered with each other (as __syncwarp orders them).
  const void* sync = race::phase_sync(&r, r.phase);
  race::release(sync);
  if (++r.arrived < lanes_of(warpgroup, group)) {
    wait(warpgroup ? Wait::warpgroup : Wait::warp, what, unsigned(group));
    race::acquire(sync);
    return;
  }
  r.arrived = 0;
  race::acquire(sync);
  complete(r.lanes);
  race::release(sync);
  ++r.phase;
  for (int i = group * size; i < group * size + size && i < int(threads.size()); ++i)
    if (i != current && threads[std::size_t(i)].state == Thread::waiting &&
        threads[std::size_t(i)].wait == (warpgroup ? Wait::warpgroup : Wait::warp))
      wake(threads[std::size_t(i)]);
}

}  // namespace mojo::cpu
