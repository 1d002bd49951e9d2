#include "runtime/workspace.hpp"

namespace mojo {

WorkspaceArena::Slot& WorkspaceArena::slot(StreamHandle stream) {
  for (Slot& s : slots_)
    if (s.stream == stream) return s;
  return slots_.emplace_back(Slot{.stream = stream});
}

bool WorkspaceArena::grow(DeviceBuffer& buffer, std::size_t bytes) {
  if (buffer.size() >= bytes) return false;
  // Exactly `bytes`: the cpu device's ASan then sees a kernel reading past the end.
  DeviceBuffer larger(bytes);
  if (buffer.size() > 0) outgrown_.push_back(std::move(buffer));
  buffer = std::move(larger);
  return true;
}

Workspace WorkspaceArena::get(StreamHandle stream, std::size_t scratch_bytes, std::size_t sync_words) {
  std::lock_guard lock(mutex_);
  Slot& s = slot(stream);
  Workspace w;
  if (scratch_bytes > 0) {
    grow(s.scratch, scratch_bytes);
    w.scratch = s.scratch.ptr();
  }
  if (sync_words > 0) {
    if (grow(s.sync, sync_words * sizeof(unsigned))) s.sync_zeroed = false;
    if (!s.sync_zeroed) {
      fill_async(s.sync.ptr(), 0, s.sync.size(), stream);
      s.sync_zeroed = !is_capturing(stream);
    }
    w.sync = s.sync.ptr();
  }
  return w;
}

void WorkspaceArena::forget_sync(StreamHandle stream) {
  std::lock_guard lock(mutex_);
  slot(stream).sync_zeroed = false;
}

std::size_t WorkspaceArena::bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  for (const Slot& s : slots_) total += s.scratch.size() + s.sync.size();
  for (const DeviceBuffer& b : outgrown_) total += b.size();
  return total;
}

}  // namespace mojo
