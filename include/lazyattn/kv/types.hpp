// Plain types of the paged KV store: its configuration, handles, what its calls return,
// statistics, and the geometry of the page pool that kernels index with.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "lazyattn/config.hpp"
#include "lazyattn/dtype.hpp"
#include "lazyattn/kv/doc_key.hpp"
#include "lazyattn/rope/types.hpp"

namespace lazyattn {

// Which unpinned document a store evicts first when pages run out.
//  kLru: the least recently used.
//  kSegmentedLru: segmented LRU (SLRU): a document enters a probationary segment and moves to a
//    protected one when it is asked for again (a find() that hits, or an insert or allocate of a
//    key already stored); the protected segment holds at most 80% of the pages, its least
//    recently used documents going back to probation beyond that. Eviction takes probation's
//    least recently used first, so documents used once (the long tail of a skewed popularity)
//    do not push out the ones asked for again, as they do under LRU.
enum class EvictionPolicy : std::uint8_t { kLru = 0, kSegmentedLru = 1 };

inline const char* to_string(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::kLru: return "lru";
    case EvictionPolicy::kSegmentedLru: return "segmented_lru";
  }
  return "?";
}

struct KvStoreConfig {
  int num_layers = 1;
  int num_kv_heads = 8;
  int head_dim = 128;
  int page_size = 16;              // tokens per page
  DType dtype = DType::kBFloat16;  // element type of K and V
  std::int64_t num_pages = 1024;   // the page budget: every document and tail page comes from it
  EvictionPolicy eviction = EvictionPolicy::kLru;
  // fp8 pools (dtype kFloat8E4M3) only: K and V are stored as e4m3(x / scale) and read as
  // e4m3 * scale, one scale per layer and KV head, [num_layers][num_kv_heads]; empty: 1 for
  // every layer and head. Per layer and head, not per page or token: a document's pages are read
  // by any request at any position with no metadata beside the page table, and a rotary pair's
  // two dims share their scale, so raw keys rotate in the kernel after one multiply. Other
  // dtypes: empty.
  std::vector<float> k_scale{};
  std::vector<float> v_scale{};
};

// A document's place in a store. `generation` changes whenever the slot is reused, so a handle
// kept past its document's eviction is detected as stale instead of reading another document;
// `store` is the id of the store that gave it (KvBookkeeping::id(), never 0), so that another
// store refuses it instead of reading its own document in that slot.
struct DocHandle {
  std::uint32_t slot = 0xffffffffu;
  std::uint32_t generation = 0;
  std::uint64_t store = 0;  // 0: no store's (a default handle)
  friend bool operator==(const DocHandle&, const DocHandle&) = default;
};

// A request's private tail (its question and generated tokens), with the same three parts.
struct TailHandle {
  std::uint32_t slot = 0xffffffffu;
  std::uint32_t generation = 0;
  std::uint64_t store = 0;
  friend bool operator==(const TailHandle&, const TailHandle&) = default;
};

inline std::ostream& operator<<(std::ostream& os, DocHandle h) {
  return os << "doc(slot " << h.slot << ", generation " << h.generation << ", store " << h.store
            << ")";
}
inline std::ostream& operator<<(std::ostream& os, TailHandle h) {
  return os << "tail(slot " << h.slot << ", generation " << h.generation << ", store " << h.store
            << ")";
}

// What info() and insert() / allocate() return.
struct DocInfo {
  DocKey key;
  StorageForm form = StorageForm::kRaw;
  std::int64_t length = 0;
  std::int32_t pins = 0;
  bool committed = false;
  std::vector<std::int32_t> pages;  // [ceil(length / page_size)]
  std::uint64_t last_use = 0;  // the store's clock at its last use: the LRU order of unpinned ones
};

struct TailInfo {
  StorageForm form = StorageForm::kLocal;
  std::int64_t length = 0;
  std::vector<std::int32_t> pages;  // [ceil(length / page_size)]
};

struct InsertResult {
  DocHandle handle;
  bool inserted = false;  // false: the key was already stored and nothing was copied
};

struct KvStoreStats {
  std::int64_t hits = 0;       // find() calls that found the document
  std::int64_t misses = 0;     // find() calls that did not
  std::int64_t inserts = 0;    // documents stored
  std::int64_t dedupes = 0;    // insert() calls whose key was already stored (nothing copied)
  std::int64_t evictions = 0;  // documents evicted to make room
  std::int64_t documents = 0;  // documents held now
  std::int64_t pinned_documents = 0;
  std::int64_t tails = 0;
  std::int64_t pages_total = 0;
  std::int64_t pages_in_use = 0;
  std::int64_t bytes_in_use = 0;  // K and V, all layers
};

// Where element (layer, page, head, slot, dim) lives in a K or V pool laid out as
// [num_layers, num_pages, num_kv_heads, page_size, head_dim] (one head's page is contiguous:
// page_size * head_dim elements, 4 KiB for bf16 at 16 x 128). Offsets count elements.
struct PoolGeometry {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  std::int64_t num_pages = 0;

  LAZYATTN_HOST_DEVICE std::int64_t head_stride() const {
    return static_cast<std::int64_t>(page_size) * head_dim;
  }
  LAZYATTN_HOST_DEVICE std::int64_t page_stride() const { return head_stride() * num_kv_heads; }
  LAZYATTN_HOST_DEVICE std::int64_t layer_stride() const { return page_stride() * num_pages; }
  LAZYATTN_HOST_DEVICE std::int64_t elements() const { return layer_stride() * num_layers; }
  LAZYATTN_HOST_DEVICE std::int64_t offset(int layer, std::int64_t page, int head, int slot) const {
    return layer * layer_stride() + page * page_stride() + head * head_stride() +
           static_cast<std::int64_t>(slot) * head_dim;
  }
};

}  // namespace lazyattn
