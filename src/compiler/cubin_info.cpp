// kernel_resources: registers, static shared memory and stack of one kernel
// of a cubin, from its ELF sections (the layout cuobjdump -res-usage reads):
//   .nv.info            EIATTR records; REGCOUNT (0x2f) and FRAME_SIZE (0x11)
//                       carry {symbol index, value} per kernel
//   .nv.shared.<kernel> NOBITS, its size is the static shared memory; where the
//                       cubin has a .nv.shared.reserved.0 section (ptxas 13 for
//                       sm_90+), that size includes the 1 KB a block the driver
//                       keeps for itself, which the driver and Nsight Compute
//                       count apart ("Driver Shared Memory Per Block"), as the
//                       performance model does (SmLimits::reserved_shared_bytes)
// The bytes are untrusted (a cache entry, a file): every read is bounds-checked.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "mojo/compiler.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace {

struct Section {
  std::uint32_t name, type;
  std::uint64_t offset, size, entsize;
  std::uint32_t link;
};

class Elf {
 public:
  explicit Elf(std::string_view bytes) : b_(bytes) {
    if (b_.size() < 64 || b_.substr(0, 4) != "\x7f" "ELF" || b_[4] != 2 /* 64-bit */)
      fail("not a 64-bit ELF file");
    const auto shoff = read<std::uint64_t>(0x28);
    const auto entsize = read<std::uint16_t>(0x3a), count = read<std::uint16_t>(0x3c), strndx = read<std::uint16_t>(0x3e);
    if (entsize < 64) fail("bad section header size");
    for (std::uint16_t i = 0; i < count; ++i) {
      const std::uint64_t h = shoff + std::uint64_t(i) * entsize;
      sections_.push_back({read<std::uint32_t>(h), read<std::uint32_t>(h + 4), read<std::uint64_t>(h + 0x18),
                           read<std::uint64_t>(h + 0x20), read<std::uint64_t>(h + 0x38), read<std::uint32_t>(h + 0x28)});
    }
    if (strndx >= sections_.size()) fail("no section names");
    names_ = sections_[strndx];
  }

  const std::vector<Section>& sections() const { return sections_; }
  std::string_view section_name(const Section& s) const { return string_at(names_, s.name); }
  std::string_view string_at(const Section& table, std::uint64_t at) const {
    const std::string_view all = bytes_of(table);  // empty for a NOBITS table
    if (at >= all.size()) fail("string out of range");
    return all.substr(at, all.find('\0', at) - at);
  }
  std::string_view bytes_of(const Section& s) const {
    if (s.type == 8 /* NOBITS */) return {};
    if (s.offset > b_.size() || s.size > b_.size() - s.offset) fail("section out of range");
    return b_.substr(s.offset, s.size);
  }
  template <class T> T read(std::uint64_t at) const {
    if (at > b_.size() || sizeof(T) > b_.size() - at) fail("truncated");
    T v;
    std::memcpy(&v, b_.data() + at, sizeof v);
    return v;
  }
  [[noreturn]] static void fail(const std::string& what) {
    throw InvalidArgumentError(fmt::format("not a readable cubin: {}", what));
  }

 private:
  std::string_view b_;
  std::vector<Section> sections_;
  Section names_{};
};

}  // namespace

KernelResources kernel_resources(std::string_view cubin, std::string_view kernel) {
  const Elf elf(cubin);
  // The kernel's symbol index.
  std::int64_t symbol = -1;
  for (const Section& s : elf.sections()) {
    if (s.type != 2 /* SYMTAB */ || s.entsize < 24 || s.link >= elf.sections().size()) continue;
    const Section& strings = elf.sections()[s.link];
    for (std::uint64_t i = 0; i < s.size / s.entsize && symbol < 0; ++i) {
      const auto name = elf.read<std::uint32_t>(s.offset + i * s.entsize);
      if (elf.string_at(strings, name) == kernel) symbol = std::int64_t(i);
    }
  }
  if (symbol < 0) throw InvalidArgumentError(fmt::format("the cubin has no kernel '{}'", kernel));

  KernelResources r;
  bool holds_driver_share = false;
  for (const Section& s : elf.sections()) {
    const std::string_view name = elf.section_name(s);
    if (name == ".nv.shared." + std::string(kernel)) r.static_shared_bytes = s.size;
    if (name == ".nv.shared.reserved.0") holds_driver_share = true;
    if (name != ".nv.info") continue;
    // Records: u8 format, u8 attribute, then by format: 1 nothing, 2 one byte,
    // 3 a u16 value, 4 a u16 size and that many bytes.
    const std::string_view info = elf.bytes_of(s);
    std::size_t p = 0;
    while (p + 2 <= info.size()) {
      const unsigned format = static_cast<unsigned char>(info[p]), attribute = static_cast<unsigned char>(info[p + 1]);
      if (format == 1) { p += 2; continue; }
      if (format == 2 || format == 3) { p += 4; continue; }
      if (format != 4 || p + 4 > info.size()) break;
      std::uint16_t size;
      std::memcpy(&size, info.data() + p + 2, 2);
      if (p + 4 + size > info.size()) break;
      if (size == 8 && (attribute == 0x2f || attribute == 0x11)) {
        std::uint32_t sym, value;
        std::memcpy(&sym, info.data() + p + 4, 4);
        std::memcpy(&value, info.data() + p + 8, 4);
        if (sym == symbol && attribute == 0x2f) r.registers = int(value);
        if (sym == symbol && attribute == 0x11) r.stack_bytes = value;
      }
      p += 4 + size;
    }
  }
  // The driver's share, within the section of a kernel that uses shared memory at all: rms_norm's holds 1,152
  // bytes for sm_90 (128 for sm_80), where Nsight Compute put it at 128 static and 1.02 KB the driver's (H100,
  // 2026-11-24).
  constexpr std::uint64_t kDriverShare = 1024;
  if (holds_driver_share) r.static_shared_bytes -= std::min(r.static_shared_bytes, kDriverShare);
  return r;
}

}  // namespace mojo
