// The CPU device's SIMT executor: runs a kernel built for the host (a
// function per GPU thread) over a grid, each thread a fiber, with the
// preludes' primitives emulated with the PTX ISA's semantics (block.hpp,
// primitives.cpp). Not fast: faithful enough that a wrong index, layout,
// barrier or wait makes a result wrong or stops the launch with a DeviceError.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mojo/device.hpp"
#include "mojo/target.hpp"

namespace mojo::cpu {

// One kernel of a loaded host library.
struct Kernel {
  std::string name;
  void (*entry)(void** args) = nullptr;   // runs one GPU thread
  const unsigned* params = nullptr;       // parameter count, then each parameter's size
  unsigned max_dynamic_smem = 48 * 1024;  // raised by Function::set_max_dynamic_shared, as on the GPU
  void (*tls_touch)() = nullptr;          // allocates the library's thread-local block on the calling OS thread
};

struct Launch;

// What the emulated GPU allows, from its target.
struct Limits {
  Target target;
  int sm_count = 0;
  unsigned max_smem_optin = 0;  // dynamic shared memory per block, opted in
  unsigned max_threads_per_sm = 2048;
  // How many of the launch's blocks an SM holds at once, as far as the CPU device knows (threads and dynamic
  // shared memory; not registers): what a cooperative launch may have per SM.
  unsigned resident_blocks_per_sm(const Launch& l) const;
  static Limits of(const Target& target);
};

// How a launch runs: the order of a block's threads between synchronisation
// points (MOJO_JIT_CPU_SCHEDULE=forward (default) | reverse | random:SEED),
// and how many OS threads take its blocks (MOJO_JIT_CPU_THREADS, default 1).
struct Schedule {
  enum Order { forward, reverse, random } order = forward;
  std::uint64_t seed = 0;
  unsigned threads = 1;
  static Schedule parse(std::string_view text);  // the order; throws InvalidArgumentError
  static Schedule from_env();
};

struct Launch {
  const Kernel* kernel;
  Dim3 grid, block;
  unsigned dynamic_smem;
  void** args;
  bool cooperative = false;  // LaunchOptions::cooperative
};

// Runs every block of the launch; throws DeviceError naming the kernel and
// block when a thread fails a check or the block deadlocks.
void run(const Launch& launch, const Limits& limits, const Schedule& schedule);

// The CPU device's TMA descriptor, kept in TensorMap::opaque: what
// cuTensorMapEncodeTiled would encode for a tiled, interleave-free map.
struct TensorMapRecord {
  std::uint64_t magic;
  std::uint64_t base;
  std::uint64_t dims[3];
  std::uint64_t strides[2];  // bytes, of dims 1 and 2
  std::uint32_t box[3];
  std::uint32_t element_bytes;
  std::uint32_t swizzle_bytes;  // 0, 32, 64 or 128
};
constexpr std::uint64_t kTensorMapMagic = 0x70616d726f736e65ull;  // "ensormap"

}  // namespace mojo::cpu
