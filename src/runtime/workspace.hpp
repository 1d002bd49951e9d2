// The memory the plans of ops made of several kernels, or of blocks that meet, borrow (OpDef::workspace_bytes,
// OpDef::sync_words): per stream, a scratch buffer grown to the largest request, and a buffer of sync words
// kept zero between launches. Kernels on one stream run in order, so every launch on it can share them; a
// launch after the first for a shape gets the same pointers and allocates nothing, which also lets a CUDA
// graph capture it.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "mojo/device.hpp"
#include "mojo/op.hpp"

namespace mojo {

class WorkspaceArena {
 public:
  // `scratch_bytes` of scratch and `sync_words` zeroed words for a launch on `stream` (of the current device),
  // each 256-byte aligned (a pointer of 0 where none is asked for). Growing allocates a larger buffer and keeps
  // the old one until the arena goes: work already queued, and CUDA graphs captured with it, may still use it.
  // A capture may allocate: the graph keeps the buffer of its capture, which the arena keeps. New sync words
  // are zeroed in stream order; where that happens in a capture (which runs nothing), again after it.
  Workspace get(StreamHandle stream, std::size_t scratch_bytes, std::size_t sync_words);
  // After a launch on `stream` that failed: its kernels may have left sync words set, so the next get()
  // zeroes them again.
  void forget_sync(StreamHandle stream);
  // Bytes held, over all streams, outgrown buffers included.
  std::size_t bytes() const;

 private:
  struct Slot {
    StreamHandle stream;
    DeviceBuffer scratch, sync;
    bool sync_zeroed = false;  // a fill of `sync` with zeros is queued outside a capture
  };
  Slot& slot(StreamHandle stream);
  // `buffer` at least `bytes` long; true when it was (re)allocated.
  bool grow(DeviceBuffer& buffer, std::size_t bytes);

  mutable std::mutex mutex_;
  std::vector<Slot> slots_;  // few streams: a list beats a map
  std::vector<DeviceBuffer> outgrown_;
};

}  // namespace mojo
