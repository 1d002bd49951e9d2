#include "runtime/workspace.hpp"

namespace mojo {

DevicePtr WorkspaceArena::get(StreamHandle stream, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  Slot* slot = nullptr;
  for (Slot& s : slots_)
    if (s.stream == stream) slot = &s;
  if (slot == nullptr) slot = &slots_.emplace_back(Slot{stream, DeviceBuffer()});
  if (slot->buffer.size() < bytes) {
    synchronize(stream);
    slot->buffer = DeviceBuffer();  // freed before the larger one is allocated
    slot->buffer = DeviceBuffer(bytes);  // exactly: the cpu device's ASan sees a kernel reading past it
  }
  return slot->buffer.ptr();
}

std::size_t WorkspaceArena::bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  for (const Slot& s : slots_) total += s.buffer.size();
  return total;
}

}  // namespace mojo
