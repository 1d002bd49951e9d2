#include "runtime/workspace.hpp"

namespace mojo {

DevicePtr WorkspaceArena::get(StreamHandle stream, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  Slot* slot = nullptr;
  for (Slot& s : slots_)
    if (s.stream == stream) slot = &s;
  if (slot == nullptr) slot = &slots_.emplace_back(Slot{stream, DeviceBuffer()});
  if (slot->buffer.size() < bytes) {
    // Exactly `bytes`: the cpu device's ASan then sees a kernel reading past the end.
    DeviceBuffer larger(bytes);
    if (slot->buffer.size() > 0) outgrown_.push_back(std::move(slot->buffer));
    slot->buffer = std::move(larger);
  }
  return slot->buffer.ptr();
}

std::size_t WorkspaceArena::bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  for (const Slot& s : slots_) total += s.buffer.size();
  for (const DeviceBuffer& b : outgrown_) total += b.size();
  return total;
}

}  // namespace mojo
