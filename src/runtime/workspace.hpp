// Scratch memory for the plans of ops made of several kernels (OpDef::
// workspace_bytes): one buffer per stream, grown to the largest request.
// Kernels on one stream run in order, so every launch on it can share its
// buffer; a launch after the first for a shape gets the same pointer and
// allocates nothing, which also lets a CUDA graph capture it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "mojo/device.hpp"

namespace mojo {

class WorkspaceArena {
 public:
  // `bytes` of scratch for a launch on `stream` (of the current device),
  // 256-byte aligned. Growing allocates a larger buffer and keeps the old
  // one until the arena goes: work already queued, and CUDA graphs captured
  // with it, may still use it. A capture may allocate: the graph keeps the
  // buffer of its capture, which the arena keeps.
  DevicePtr get(StreamHandle stream, std::size_t bytes);
  // Bytes held, over all streams, outgrown buffers included.
  std::size_t bytes() const;

 private:
  struct Slot {
    StreamHandle stream;
    DeviceBuffer buffer;
  };
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;  // few streams: a list beats a map
  std::vector<DeviceBuffer> outgrown_;
};

}  // namespace mojo
