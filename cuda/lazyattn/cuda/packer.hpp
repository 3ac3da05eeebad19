// Packer: host arrays laid out back to back, each at a 16-byte boundary, for one host-to-device
// copy (DevicePlan's upload, and any caller that ships several small arrays per step). Host-only:
// add() the arrays, size the staging buffer to size(), write() into it, then read each array on
// the device at base + the offset add() returned.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

namespace lazyattn::cuda::detail {

class Packer {
 public:
  // Reserves room for `v` (read by write(), so it must outlive that call); returns its offset.
  template <class T>
  std::size_t add(const std::vector<T>& v) {
    const std::size_t off = (size_ + 15) & ~std::size_t{15};
    parts_.push_back(Part{v.data(), v.size() * sizeof(T), off});
    size_ = off + v.size() * sizeof(T);
    return off;
  }
  std::size_t size() const { return size_; }
  // Copies every added array to its offset in dst (at least size() bytes).
  void write(std::byte* dst) const {
    for (const Part& p : parts_) {
      if (p.bytes) std::memcpy(dst + p.offset, p.src, p.bytes);
    }
  }

 private:
  struct Part {
    const void* src;
    std::size_t bytes;
    std::size_t offset;
  };
  std::vector<Part> parts_;
  std::size_t size_ = 0;
};

}  // namespace lazyattn::cuda::detail
