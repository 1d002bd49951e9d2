// The grid loop, the scheduler and the block's synchronisation: barriers,
// rendezvous, thread exit and deadlock reports.
#include "device/cpu/executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <utility>

#include "device/cpu/block.hpp"
#include "core/config.hpp"
#include "mojo/error.hpp"

namespace mojo::cpu {

namespace {

#if MOJO_ASAN
constexpr std::size_t kStackBytes = 1 << 20;  // instrumented frames are larger
#else
constexpr std::size_t kStackBytes = 256 << 10;
#endif
constexpr std::uint64_t kMaxCooperativeBlocks = 512;

// What each OS thread keeps between launches: the block state, its fibers
// and the shared-memory arena.
struct FreeBytes {
  void operator()(unsigned char* p) const { std::free(p); }
};
struct Worker {
  Block block;
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::unique_ptr<unsigned char[], FreeBytes> arena;
  std::size_t arena_bytes = 0;
  std::vector<int> order;  // the threads in scheduling order
};
thread_local Worker t_worker;
thread_local Block* t_running = nullptr;

void thread_main(void* arg) {
  auto* t = static_cast<Thread*>(arg);
  race::quiet_begin();
  Block& b = *t_running;
  race::quiet_end();
  race::acquire(&b.start_sync);  // what the scheduler did before the block began
  b.launch->kernel->entry(b.args);
  Fiber* fiber = t->fiber;  // read before the release: the scheduler reuses `t` once it acquires
  {
    Quiet quiet;
    b.exit_thread();
  }
  race::release(&b.end_sync);
  fiber->suspend(true);
}

std::string describe_wait(const Block& b, const Thread& t) {
  switch (t.wait) {
    case Wait::barrier:
      return t.wait_arg == 0
                 ? fmt::format("bar.sync {} (all threads; {} of {} arrived)", t.wait_id, b.barriers[t.wait_id].arrived,
                               b.live)
                 : fmt::format("bar.sync {}, {} ({} arrived)", t.wait_id, t.wait_arg, b.barriers[t.wait_id].arrived);
    case Wait::warp:
      return fmt::format("{} (warp {}: {} of its lanes arrived)", t.wait_what, t.wait_id, b.warps[t.wait_id].arrived);
    case Wait::warpgroup:
      return fmt::format("{} (warpgroup {}: {} of its threads arrived)", t.wait_what, t.wait_id,
                         b.warpgroups[t.wait_id].arrived);
    case Wait::mbarrier: {
      for (const Mbarrier& m : b.mbarriers)
        if (m.address == t.wait_id)
          return fmt::format("mbarrier 0x{:x} parity {} (phase {}: {} of {} arrivals and {} transaction bytes pending)",
                             t.wait_id, t.wait_arg, m.phase, m.pending, m.expected, m.tx);
      return fmt::format("mbarrier 0x{:x}", t.wait_id);
    }
    case Wait::counter:
      return fmt::format("{} at {} (it holds {}; waits for {})", t.wait_what, static_cast<const void*>(t.wait_counter),
                         __atomic_load_n(t.wait_counter, __ATOMIC_RELAXED), t.wait_arg);
    case Wait::none:
      break;
  }
  return "nothing";
}

// "; threads 0-31, 64 wait at bar.sync 1, 128 (...)": threads grouped by what they wait for.
std::string deadlock_report(const Block& b) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  int exited = 0;
  for (std::size_t i = 0; i < b.threads.size(); ++i) {
    const Thread& t = b.threads[i];
    if (t.state == Thread::exited) {
      ++exited;
      continue;
    }
    std::string what = describe_wait(b, t);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == what; });
    if (it == groups.end()) it = groups.insert(groups.end(), {std::move(what), {}});
    it->second.push_back(int(i));
  }
  std::string out;
  for (auto& [what, ids] : groups) {
    std::string list;
    for (std::size_t i = 0; i < ids.size();) {
      std::size_t j = i;
      while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
      list += fmt::format("{}{}", list.empty() ? "" : ", ",
                          i == j ? std::to_string(ids[i]) : fmt::format("{}-{}", ids[i], ids[j]));
      i = j + 1;
    }
    out += fmt::format("; threads {} wait at {}", list, what);
  }
  if (exited > 0) out += fmt::format("; {} thread(s) exited", exited);
  return out;
}

[[noreturn]] void launch_error(const Launch& l, std::string_view what) {
  throw DeviceError(fmt::format("cpu device: kernel {}: {}", l.kernel->name, what));
}

void run_block(Block& b, Worker& w, const Launch& l, const Schedule& schedule, unsigned x, unsigned y, unsigned z,
               GridSync* grid) {
  // A block's random order depends on the seed and the block alone, whichever OS thread runs it.
  std::mt19937_64 rng(schedule.seed ^
                      (0x9e3779b97f4a7c15ull * (1 + x + std::uint64_t(l.grid.x) * (y + std::uint64_t(l.grid.y) * z))));
  const unsigned n = l.block.x;
  b.launch = &l;
  b.args = l.args;
  b.index = {x, y, z};
  b.grid = grid;
  b.threads.resize(n);
  b.live = int(n);
  b.current = -1;
  b.error.clear();
  for (auto& bar : b.barriers) bar = {};
  b.warps.assign((n + 31) / 32, Rendezvous{});
  b.warpgroups.assign((n + 127) / 128, Rendezvous{});
  b.exited_in_warp.assign((n + 31) / 32, 0);
  b.mbarriers.clear();
  b.unfenced.assign((b.smem_bytes + 15) / 16, 0);
  b.unfenced_count = 0;
  // Reset in place: a launch that hits the cache allocates nothing once the containers have grown.
  b.wgmma.resize((n + 127) / 128);
  for (Warpgroup& wg : b.wgmma) {
    wg.fenced = false;
    wg.open.clear();
    wg.groups.clear();
    wg.in_flight.clear();
  }
  // Poisoned: shared memory is uninitialised on the GPU, and NaN in every float type here.
  std::memset(b.smem, 0xff, b.smem_bytes);
  while (w.fibers.size() < n) w.fibers.push_back(std::make_unique<Fiber>(kStackBytes));
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.regs = mojo_cpu_thread{i, n, {x, y, z}, {l.grid.x, l.grid.y, l.grid.z}};
    t.fiber = w.fibers[i].get();
    t.state = Thread::runnable;
    t.wait = Wait::none;
    t.quiet = 0;
#if MOJO_TSAN
    char name[64];  // on the stack: a cache-hit launch allocates nothing, in this build too
    *fmt::format_to_n(name, sizeof name - 1, "GPU thread {} of block ({}, {}, {})", i, x, y, z).out = '\0';
    t.fiber->name(name);
#endif
    t.open_copies.clear();
    t.copy_groups.clear();
    t.unfenced_writes.clear();
    t.fiber->start(&thread_main, &t);
  }
  // TSan: the block's threads see what the scheduler did so far; the
  // scheduler sees what they did once they stop (the next block on this OS
  // thread reuses its shared memory; blocks on other OS threads stay unordered).
  if (l.kernel->tls_touch != nullptr) l.kernel->tls_touch();
  race::release(&b.start_sync);
  struct End {
    Block& b;
    ~End() { race::acquire(&b.end_sync); }
  } end{b};
  std::vector<int>& order = w.order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  if (schedule.order == Schedule::reverse) std::reverse(order.begin(), order.end());
  std::exception_ptr stopped;  // the block's failure, deadlock, or another block's in a cooperative grid
  try {
    while (b.live > 0) {
      if (schedule.order == Schedule::random) std::shuffle(order.begin(), order.end(), rng);
      b.wake_counter_waits();
      bool ran = false;
      for (int i : order) {
        Thread& t = b.threads[std::size_t(i)];
        if (t.state != Thread::runnable) continue;
        b.current = i;
        t.fiber->resume();
        ran = true;
        if (!b.error.empty()) launch_error(l, fmt::format("block ({}, {}, {}), thread {}: {}", x, y, z, i, b.error));
      }
      if (ran) continue;
      if (grid != nullptr &&
          std::any_of(b.threads.begin(), b.threads.end(), [](const Thread& t) { return t.waits_for_counter(); })) {
        grid->stall(b);  // until another block advances a counter waited for
        continue;
      }
      launch_error(l, fmt::format("block ({}, {}, {}) deadlocked: no thread can go on (a GPU would hang){}", x, y, z,
                                  deadlock_report(b)));
    }
  } catch (...) {
    stopped = std::current_exception();
  }
  if (stopped) {
    b.abandon();
    std::rethrow_exception(stopped);
  }
  b.current = -1;
}

}  // namespace

Block& current_block() { return *t_running; }

// ---- the blocks of a cooperative launch ------------------------------------------------

bool Block::counter_wait_holds() const {
  return std::any_of(threads.begin(), threads.end(), [](const Thread& t) { return t.counter_reached(); });
}

void Block::wake_counter_waits() {
  for (Thread& t : threads)
    if (t.counter_reached()) wake(t);
}

void GridSync::stall(Block& b) {
  std::unique_lock lock(mutex_);
  stalled_.push_back(&b);
  changed_.notify_all();  // what this block wrote before it stalled may be what another waits for
  struct Leave {
    std::vector<Block*>& stalled;
    Block* b;
    ~Leave() { stalled.erase(std::find(stalled.begin(), stalled.end(), b)); }
  } leave{stalled_, &b};
  for (;;) {
    if (aborted_) throw GridAborted{};
    if (b.counter_wait_holds()) return;
    // A stalled block writes nothing, so when every unfinished one is stalled and none of their waits holds,
    // none ever will.
    if (int(stalled_.size()) == unfinished_ &&
        std::none_of(stalled_.begin(), stalled_.end(), [](const Block* s) { return s->counter_wait_holds(); })) {
      std::string report;
      for (const Block* s : stalled_)
        report += fmt::format("; block ({}, {}, {}){}", s->index.x, s->index.y, s->index.z, deadlock_report(*s));
      aborted_ = true;
      changed_.notify_all();
      throw DeviceError(
          fmt::format("cpu device: kernel {}: the cooperative grid deadlocked: no block can go on (a "
                      "GPU would hang){}",
                      b.launch->kernel->name, report));
    }
    // Counters change without a call here; a block that advances one stalls or ends before long, and says so.
    changed_.wait_for(lock, std::chrono::milliseconds(10));
  }
}

void GridSync::finished() {
  std::lock_guard lock(mutex_);
  --unfinished_;
  changed_.notify_all();
}

void GridSync::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

// ---- the block's synchronisation ---------------------------------------------------

void Block::wait(Wait why, const char* what, unsigned id, unsigned arg) {
  Thread& t = self();
  t.state = Thread::waiting;
  t.wait = why;
  t.wait_what = what;
  t.wait_id = id;
  t.wait_arg = arg;
  suspend_in_primitive();
}

void Block::suspend_in_primitive() {
  Thread& t = self();
  t.fiber->suspend();
  if (abandoning) {          // the block stopped: close the primitive's Quiet scopes and stop for good, as fail() does
    Fiber* fiber = t.fiber;  // read before the release: the scheduler reuses `t` once it acquires
    const int quiet = std::exchange(t.quiet, 0);
    race::release(&end_sync);
    for (int i = 0; i < quiet; ++i) race::quiet_end();
    fiber->suspend(true);
    __builtin_unreachable();
  }
}

void Block::abandon() {
  abandoning = true;
  for (std::size_t i = 0; i < threads.size(); ++i)
    if (threads[i].state != Thread::exited && threads[i].quiet > 0) {  // suspended inside a primitive
      current = int(i);
      threads[i].fiber->resume();
    }
  abandoning = false;
  current = -1;
}

void Block::fail(std::string message) {
  if (error.empty()) error = std::move(message);
  Thread& t = self();
  t.state = Thread::waiting;
  t.wait = Wait::none;
  Fiber* fiber = t.fiber;
  const int quiet = std::exchange(t.quiet, 0);
  race::release(&end_sync);
  for (int i = 0; i < quiet; ++i) race::quiet_end();  // the thread never returns to close them
  fiber->suspend(true);
  __builtin_unreachable();
}

unsigned char* Block::shared(unsigned address, unsigned bytes, unsigned align, const char* what) {
  if (address % align != 0) fail(fmt::format("{}: shared address 0x{:x} is not {}-byte aligned", what, address, align));
  if (address < kWindowBase || std::uint64_t(address) + bytes > std::uint64_t(kWindowBase) + smem_bytes)
    fail(
        fmt::format("{}: {} bytes at shared address 0x{:x} are outside the block's {} bytes of dynamic shared memory "
                    "[0x{:x}, 0x{:x})",
                    what, bytes, address, smem_bytes, kWindowBase, kWindowBase + smem_bytes));
  return smem + (address - kWindowBase);
}

int Block::lanes_of(bool warpgroup, int group) const {
  const int size = warpgroup ? 128 : 32;
  return std::min(size, int(threads.size()) - group * size);
}

// bar.sync (`wait_for_it`) and bar.arrive: both count the thread at barrier `id`; the last of `count` threads
// completes its phase and releases the waiters. An arrive releases what the thread did before it to them, and
// waits for nothing.
void Block::barrier(int id, int count, bool wait_for_it) {
  const char* what = wait_for_it ? "bar.sync" : "bar.arrive";
  if (id < 0 || id > 15) fail(fmt::format("{} {}: barriers are numbered 0 to 15", what, id));
  if (!wait_for_it && count == 0) fail(fmt::format("bar.arrive {}: needs a thread count", id));
  if (count < 0 || count % 32 != 0 || count > int(threads.size()))
    fail(fmt::format("{} {}, {}: the thread count must be a multiple of 32 up to the block's {} threads", what, id,
                     count, threads.size()));
  Barrier& bar = barriers[id];
  if (bar.arrived > 0 && bar.threads != count)
    fail(fmt::format("{} {} with {} threads while {} threads wait at it with {}", what, id, count, bar.arrived,
                     bar.threads));
  bar.threads = count;
  ++bar.arrived;
  const void* sync = race::phase_sync(&bar, bar.phase);
  race::release(sync);
  if (bar.arrived < (count != 0 ? count : live)) {
    if (!wait_for_it) return;
    wait(Wait::barrier, nullptr, unsigned(id), unsigned(count));
    race::acquire(sync);
    return;
  }
  bar.arrived = 0;
  ++bar.phase;
  if (wait_for_it) race::acquire(sync);
  for (Thread& t : threads)
    if (t.state == Thread::waiting && t.wait == Wait::barrier && t.wait_id == unsigned(id)) wake(t);
}

void Block::exit_thread() {
  Thread& me = self();
  const int warp = current / 32, group = current / 128;
  if (warps[std::size_t(warp)].arrived > 0)
    fail(fmt::format("thread {} exited while its warp waits at {}", current, warps[std::size_t(warp)].what));
  if (warpgroups[std::size_t(group)].arrived > 0)
    fail(fmt::format("thread {} exited while its warpgroup waits at {}", current, warpgroups[std::size_t(group)].what));
  me.state = Thread::exited;
  me.wait = Wait::none;
  ++exited_in_warp[std::size_t(warp)];
  --live;
  // bar.sync without a count waits for the threads that have not exited.
  Barrier& all = barriers[0];
  if (all.arrived > 0 && all.threads == 0 && all.arrived >= live) {
    all.arrived = 0;
    ++all.phase;
    for (Thread& t : threads)
      if (t.state == Thread::waiting && t.wait == Wait::barrier && t.wait_id == 0) wake(t);
  }
}

Mbarrier& Block::mbarrier(unsigned address, const char* what) {
  for (Mbarrier& m : mbarriers)
    if (m.address == address) return m;
  fail(fmt::format("{} on shared address 0x{:x}, which holds no initialised mbarrier", what, address));
}

// ---- launches ------------------------------------------------------------------------

unsigned Limits::resident_blocks_per_sm(const Launch& l) const {
  // What a block takes of an SM that the CPU device knows: threads, and dynamic shared memory with the 1 KiB
  // the GPU reserves per block (an SM has max_smem_optin + 1 KiB). Registers and static shared memory would
  // lower it on a GPU.
  const unsigned by_threads = max_threads_per_sm / std::max(1u, l.block.x);
  const unsigned by_smem = (max_smem_optin + 1024) / (l.dynamic_smem + 1024);
  return std::min({32u, by_threads, by_smem});
}

Limits Limits::of(const Target& target) {
  Limits l;
  l.target = target;
  // The GPUs these targets stand for: A100 (sm_80), the RTX 30/40 class (sm_86, sm_89), H100 (sm_90).
  if (target.sm >= 90)
    l.sm_count = 132, l.max_smem_optin = 232448;
  else if (target.sm == 80)
    l.sm_count = 108, l.max_smem_optin = 166912;
  else if (target.sm > 80)
    l.sm_count = 84, l.max_smem_optin = 101376, l.max_threads_per_sm = 1536;
  else
    l.sm_count = 80, l.max_smem_optin = 98304;
  return l;
}

Schedule Schedule::parse(std::string_view text) {
  Schedule s;
  if (text == "forward") return s;
  if (text == "reverse") {
    s.order = reverse;
    return s;
  }
  if (text.substr(0, 7) == "random:" && text.size() > 7) {
    const std::string digits(text.substr(7));
    char* end = nullptr;
    s.seed = std::strtoull(digits.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && std::isdigit(static_cast<unsigned char>(digits[0]))) {
      s.order = random;
      return s;
    }
  }
  throw InvalidArgumentError(
      fmt::format("MOJO_JIT_CPU_SCHEDULE='{}': expected forward, reverse or random:SEED (SEED a number)", text));
}

Schedule Schedule::from_env() {
  const std::optional<std::string> v = config::text("MOJO_JIT_CPU_SCHEDULE");
  Schedule s = v ? parse(*v) : Schedule{};
  if (auto n = config::number("MOJO_JIT_CPU_THREADS", 1, 256, "a number of OS threads")) s.threads = unsigned(*n);
  return s;
}

void run(const Launch& l, const Limits& limits, const Schedule& schedule) {
  const Kernel& k = *l.kernel;
  if (l.block.x == 0 || l.block.x > 1024 || l.block.y != 1 || l.block.z != 1)
    launch_error(l, fmt::format("block ({}, {}, {}): the CPU device runs 1-D blocks of 1 to 1024 threads", l.block.x,
                                l.block.y, l.block.z));
  if (l.grid.x == 0 || l.grid.x > 0x7fffffffu || l.grid.y == 0 || l.grid.y > 65535 || l.grid.z == 0 || l.grid.z > 65535)
    launch_error(l, fmt::format("grid ({}, {}, {}) is outside what {} allows (x < 2^31, y and z <= 65535)", l.grid.x,
                                l.grid.y, l.grid.z, limits.target.sm_name()));
  if (l.dynamic_smem > limits.max_smem_optin)
    launch_error(l, fmt::format("{} bytes of dynamic shared memory; {} allows at most {} per block", l.dynamic_smem,
                                limits.target.sm_name(), limits.max_smem_optin));
  if (l.dynamic_smem > k.max_dynamic_smem)
    launch_error(l, fmt::format("{} bytes of dynamic shared memory, more than the {} the function allows "
                                "(Function::set_max_dynamic_shared raises it, as cuFuncSetAttribute does)",
                                l.dynamic_smem, k.max_dynamic_smem));
  if (t_running != nullptr) launch_error(l, "launched from inside a kernel");
  const std::uint64_t blocks = std::uint64_t(l.grid.x) * l.grid.y * l.grid.z;
  std::mutex failure_mutex;
  std::string failure;
  auto fail = [&](const DeviceError& e) {
    std::lock_guard lock(failure_mutex);
    if (failure.empty()) failure = e.what();
  };
  // The calling OS thread's block, with shared memory for this launch, until `Reset` goes.
  struct Reset {
    ~Reset() { t_running = nullptr; }
  };
  auto this_threads_block = [&]() -> Block& {
    Worker& w = t_worker;
    const std::size_t need = (l.dynamic_smem + 2047) / 1024 * 1024;
    if (w.arena_bytes < need) {
      w.arena.reset(static_cast<unsigned char*>(std::aligned_alloc(1024, need)));
      w.arena_bytes = need;
    }
    Block& b = w.block;
    b.smem = w.arena.get() + Block::kWindowBase % 1024;  // host and window addresses agree modulo 1024
    b.smem_bytes = l.dynamic_smem;
    t_running = &b;
    return b;
  };
  auto coordinates = [&](std::uint64_t i) {
    return Dim3{unsigned(i % l.grid.x), unsigned(i / l.grid.x % l.grid.y), unsigned(i / l.grid.x / l.grid.y)};
  };
  if (l.cooperative) {
    // Every block at once, each on an OS thread of its own (its static __shared__ arrays are the thread's).
    const std::uint64_t resident = std::uint64_t(limits.sm_count) * limits.resident_blocks_per_sm(l);
    if (blocks > resident)
      launch_error(l, fmt::format("a cooperative launch of {} blocks of {} threads: at most {} fit on {} at once "
                                  "({} SMs; a GPU refuses it with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)",
                                  blocks, l.block.x, resident, limits.target.sm_name(), limits.sm_count));
    if (blocks > kMaxCooperativeBlocks)
      launch_error(l, fmt::format("a cooperative launch of {} blocks: the CPU device runs at most {} (an OS "
                                  "thread each)",
                                  blocks, kMaxCooperativeBlocks));
    GridSync grid{int(blocks)};
    std::vector<std::thread> threads;
    threads.reserve(std::size_t(blocks));
    for (std::uint64_t i = 0; i < blocks; ++i)
      threads.emplace_back([&, i] {
        Block& b = this_threads_block();
        Reset reset;
        const Dim3 at = coordinates(i);
        try {
          run_block(b, t_worker, l, schedule, at.x, at.y, at.z, &grid);
          grid.finished();
        } catch (const DeviceError& e) {
          fail(e);
          grid.abort();
        } catch (const GridSync::GridAborted&) {
        }
      });
    for (std::thread& t : threads) t.join();
    if (!failure.empty()) throw DeviceError(failure);
    return;
  }
  // Blocks are independent: OS threads take them in turn; the first failure stops the others.
  std::atomic<std::uint64_t> next{0};
  auto work = [&] {
    Block& b = this_threads_block();
    Reset reset;
    for (std::uint64_t i; (i = next.fetch_add(1)) < blocks;) {
      try {
        const Dim3 at = coordinates(i);
        run_block(b, t_worker, l, schedule, at.x, at.y, at.z, nullptr);
      } catch (const DeviceError& e) {
        fail(e);
        next = blocks;
      }
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < std::min<std::uint64_t>(schedule.threads, blocks); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  if (!failure.empty()) throw DeviceError(failure);
}

}  // namespace mojo::cpu
