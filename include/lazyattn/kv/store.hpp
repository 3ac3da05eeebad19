// KvStore: the position-free paged KV store. Documents are stored once under a content key, in raw
// or local form, and shared by every request that places them, at any position; requests append
// their own tokens to private tails. Host memory; a device mirror reuses the same page ids.
//
// Thread safety: every member function takes one internal mutex, so any mix of calls from several
// threads is safe. Page contents are written only while a page is being filled (insert, append,
// or by the caller between allocate and commit), so a thread may read the pages of a document it
// has pinned, through the pool pointers, without holding anything.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv/doc_key.hpp"
#include "lazyattn/kv/types.hpp"

namespace lazyattn {

struct DocInfo {
  DocKey key;
  StorageForm form = StorageForm::kRaw;
  std::int64_t length = 0;
  std::int32_t pins = 0;
  bool committed = false;
  std::vector<std::int32_t> pages;  // [ceil(length / page_size)]
};

struct TailInfo {
  StorageForm form = StorageForm::kLocal;
  std::int64_t length = 0;
  std::vector<std::int32_t> pages;
};

struct InsertResult {
  DocHandle handle;
  bool inserted = false;  // false: the key was already stored and nothing was copied
};

class KvStore {
 public:
  explicit KvStore(const KvStoreConfig& config) : config_(config) {
    const char* w = "KvStore";
    LAZYATTN_CHECK(config.num_layers >= 1, w, ": num_layers ", config.num_layers,
                   ", expected >= 1");
    LAZYATTN_CHECK(config.num_kv_heads >= 1, w, ": num_kv_heads ", config.num_kv_heads,
                   ", expected >= 1");
    LAZYATTN_CHECK(config.head_dim >= 2 && config.head_dim % 2 == 0 && config.head_dim <= 1024, w,
                   ": head_dim ", config.head_dim, ", expected an even number in [2, 1024]");
    LAZYATTN_CHECK(config.page_size >= 1 && config.page_size <= 1024 &&
                       (config.page_size & (config.page_size - 1)) == 0,
                   w, ": page_size ", config.page_size, ", expected a power of two in [1, 1024]");
    LAZYATTN_CHECK(config.num_pages >= 1 && config.num_pages <= std::numeric_limits<int>::max(), w,
                   ": num_pages ", config.num_pages, ", expected in [1, 2^31 - 1]");
    geometry_ = PoolGeometry{config.num_layers, config.num_kv_heads, config.head_dim,
                             config.page_size, config.num_pages};
    std::size_t bytes =
        static_cast<std::size_t>(geometry_.elements()) * static_cast<std::size_t>(size_of(config.dtype));
    k_.assign(bytes, std::byte{0});
    v_.assign(bytes, std::byte{0});
    page_owner_.assign(static_cast<std::size_t>(config.num_pages), kFree);
    free_pages_.reserve(static_cast<std::size_t>(config.num_pages));
    // Hand out low page ids first: reversed, so pop_back() yields 0, 1, 2, ...
    for (std::int64_t p = config.num_pages - 1; p >= 0; --p)
      free_pages_.push_back(static_cast<std::int32_t>(p));
  }

  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  const KvStoreConfig& config() const { return config_; }
  const PoolGeometry& geometry() const { return geometry_; }
  // Bytes one page holds: K and V, every layer and KV head.
  std::int64_t page_bytes() const {
    return 2 * geometry_.page_stride() * geometry_.num_layers * size_of(config_.dtype);
  }
  std::int64_t pages_for(std::int64_t length) const {
    return (length + config_.page_size - 1) / config_.page_size;
  }

  // ---- documents ------------------------------------------------------------------------------

  // The document stored under (key, form), if any; counts a hit or a miss. With pin, the returned
  // document is pinned before the lock is dropped, so it cannot be evicted in between.
  std::optional<DocHandle> find(const DocKey& key, StorageForm form, bool pin = false) {
    std::lock_guard lock(mu_);
    auto it = index_.find(IndexKey{key, form});
    if (it == index_.end()) {
      ++stats_.misses;
      return std::nullopt;
    }
    ++stats_.hits;
    Doc& d = docs_[it->second];
    if (pin) pin_locked(it->second, d);
    touch_locked(it->second, d);
    return DocHandle{it->second, d.generation};
  }

  // Stores a document's K and V, each [num_layers, length, num_kv_heads, head_dim], converting to
  // the store's element type. If (key, form) is already stored, nothing is copied and the stored
  // document is returned (inserted = false); its length must match. Evicts unpinned documents,
  // least recently used first, when the free pages do not suffice; throws (store unchanged) when
  // even that would not make room.
  template <StorageElement T>
  InsertResult insert(const DocKey& key, StorageForm form, std::int64_t length,
                      std::span<const T> k, std::span<const T> v, bool pin = false) {
    check_tokens("KvStore::insert", length, k.size(), v.size());
    std::lock_guard lock(mu_);
    InsertResult r = allocate_locked(key, form, length, pin, "KvStore::insert");
    if (!r.inserted) return r;
    Doc& d = docs_[r.handle.slot];
    write_tokens(d.pages, 0, length, k, v);
    d.committed = true;
    return r;
  }

  // Reserves pages for a document whose K/V the caller writes itself (a device kernel, say) and
  // returns it pinned. Until commit(), plans refuse it. An existing (key, form) is returned as in
  // insert(), pinned, with inserted = false.
  InsertResult allocate(const DocKey& key, StorageForm form, std::int64_t length) {
    check_length("KvStore::allocate", length);
    std::lock_guard lock(mu_);
    return allocate_locked(key, form, length, true, "KvStore::allocate");
  }

  void commit(DocHandle h) {
    std::lock_guard lock(mu_);
    doc_locked(h, "KvStore::commit").committed = true;
  }

  void pin(DocHandle h) {
    std::lock_guard lock(mu_);
    Doc& d = doc_locked(h, "KvStore::pin");
    pin_locked(h.slot, d);
    touch_locked(h.slot, d);
  }

  void unpin(DocHandle h) {
    std::lock_guard lock(mu_);
    Doc& d = doc_locked(h, "KvStore::unpin");
    LAZYATTN_CHECK(d.pins > 0, "KvStore::unpin: ", h, " has pin count 0, expected > 0");
    if (--d.pins == 0) {
      --stats_.pinned_documents;
      lru_.insert({d.last_use, h.slot});
    }
  }

  // Removes an unpinned document now, returning its pages.
  void erase(DocHandle h) {
    std::lock_guard lock(mu_);
    Doc& d = doc_locked(h, "KvStore::erase");
    LAZYATTN_CHECK(d.pins == 0, "KvStore::erase: ", h, " is pinned ", d.pins,
                   " times, expected 0");
    remove_doc_locked(h.slot);
  }

  bool is_live(DocHandle h) const {
    std::lock_guard lock(mu_);
    return h.slot < docs_.size() && docs_[h.slot].live && docs_[h.slot].generation == h.generation;
  }

  DocInfo info(DocHandle h) const {
    std::lock_guard lock(mu_);
    const Doc& d = doc_locked(h, "KvStore::info");
    return DocInfo{d.key, d.form, d.length, d.pins, d.committed, d.pages};
  }

  // ---- tails ----------------------------------------------------------------------------------

  TailHandle create_tail(StorageForm form = StorageForm::kLocal) {
    std::lock_guard lock(mu_);
    std::uint32_t slot;
    if (!free_tail_slots_.empty()) {
      slot = free_tail_slots_.back();
      free_tail_slots_.pop_back();
    } else {
      LAZYATTN_CHECK(tails_.size() < kMaxSlots, "KvStore::create_tail: ", tails_.size(),
                     " tails exist, expected fewer than ", kMaxSlots);
      slot = static_cast<std::uint32_t>(tails_.size());
      tails_.emplace_back();
    }
    Tail& t = tails_[slot];
    t.live = true;
    t.form = form;
    t.length = 0;
    t.pages.clear();
    ++stats_.tails;
    return TailHandle{slot, t.generation};
  }

  // Appends n tokens, K and V each [num_layers, n, num_kv_heads, head_dim], to a tail. New pages
  // come from the free list, evicting unpinned documents if needed; on failure nothing changes.
  template <StorageElement T>
  void append(TailHandle h, std::int64_t n, std::span<const T> k, std::span<const T> v) {
    check_tokens("KvStore::append", n, k.size(), v.size());
    std::lock_guard lock(mu_);
    std::int64_t first = reserve_locked(h, n, "KvStore::append");
    write_tokens(tails_[h.slot].pages, first, n, k, v);
  }

  // Extends a tail by n tokens whose K/V the caller writes itself; returns the old length, the
  // index of the first new token.
  std::int64_t reserve(TailHandle h, std::int64_t n) {
    check_length("KvStore::reserve", n);
    std::lock_guard lock(mu_);
    return reserve_locked(h, n, "KvStore::reserve");
  }

  void release(TailHandle h) {
    std::lock_guard lock(mu_);
    Tail& t = tail_locked(h, "KvStore::release");
    for (std::int32_t p : t.pages) free_page_locked(p);
    t.pages.clear();
    t.length = 0;
    t.live = false;
    ++t.generation;
    free_tail_slots_.push_back(h.slot);
    --stats_.tails;
  }

  bool is_live(TailHandle h) const {
    std::lock_guard lock(mu_);
    return h.slot < tails_.size() && tails_[h.slot].live && tails_[h.slot].generation == h.generation;
  }

  TailInfo info(TailHandle h) const {
    std::lock_guard lock(mu_);
    const Tail& t = tail_locked(h, "KvStore::info");
    return TailInfo{t.form, t.length, t.pages};
  }

  // ---- pool memory ----------------------------------------------------------------------------

  // The K and V pools, [num_layers, num_pages, num_kv_heads, page_size, head_dim] (geometry()).
  template <StorageElement T>
  T* k_pool() {
    check_type<T>("KvStore::k_pool");
    return reinterpret_cast<T*>(k_.data());
  }
  template <StorageElement T>
  T* v_pool() {
    check_type<T>("KvStore::v_pool");
    return reinterpret_cast<T*>(v_.data());
  }
  template <StorageElement T>
  const T* k_pool() const {
    check_type<T>("KvStore::k_pool");
    return reinterpret_cast<const T*>(k_.data());
  }
  template <StorageElement T>
  const T* v_pool() const {
    check_type<T>("KvStore::v_pool");
    return reinterpret_cast<const T*>(v_.data());
  }
  const std::byte* k_bytes() const { return k_.data(); }
  const std::byte* v_bytes() const { return v_.data(); }
  std::byte* k_bytes() { return k_.data(); }
  std::byte* v_bytes() { return v_.data(); }

  // ---- accounting -----------------------------------------------------------------------------

  KvStoreStats stats() const {
    std::lock_guard lock(mu_);
    KvStoreStats s = stats_;
    s.pages_total = config_.num_pages;
    s.pages_in_use = config_.num_pages - static_cast<std::int64_t>(free_pages_.size());
    s.bytes_in_use = s.pages_in_use * page_bytes();
    return s;
  }

  // Checks the bookkeeping: every page is free or owned by exactly the document or tail whose page
  // list holds it, page lists match lengths, the LRU set holds exactly the unpinned documents.
  // Throws lazyattn::Error naming the first inconsistency. For tests; O(pages + documents).
  void validate() const {
    std::lock_guard lock(mu_);
    std::vector<std::int32_t> owner(static_cast<std::size_t>(config_.num_pages), kFree);
    auto claim = [&](std::int32_t page, std::int32_t who) {
      LAZYATTN_CHECK(page >= 0 && page < config_.num_pages, "KvStore::validate: page ", page,
                     " out of range");
      LAZYATTN_CHECK(owner[page] == kFree, "KvStore::validate: page ", page, " owned twice");
      owner[page] = who;
    };
    std::size_t unpinned = 0;
    for (std::size_t s = 0; s < docs_.size(); ++s) {
      const Doc& d = docs_[s];
      if (!d.live) continue;
      LAZYATTN_CHECK(static_cast<std::int64_t>(d.pages.size()) == pages_for(d.length),
                     "KvStore::validate: document slot ", s, " has ", d.pages.size(),
                     " pages for length ", d.length);
      for (std::int32_t p : d.pages) claim(p, doc_owner(static_cast<std::uint32_t>(s)));
      if (d.pins == 0) {
        ++unpinned;
        LAZYATTN_CHECK(lru_.count({d.last_use, static_cast<std::uint32_t>(s)}) == 1,
                       "KvStore::validate: unpinned document slot ", s, " missing from LRU");
      }
      auto it = index_.find(IndexKey{d.key, d.form});
      LAZYATTN_CHECK(it != index_.end() && it->second == s, "KvStore::validate: document slot ", s,
                     " not indexed");
    }
    LAZYATTN_CHECK(lru_.size() == unpinned, "KvStore::validate: LRU holds ", lru_.size(),
                   " entries, expected ", unpinned);
    for (std::size_t s = 0; s < tails_.size(); ++s) {
      const Tail& t = tails_[s];
      if (!t.live) continue;
      LAZYATTN_CHECK(static_cast<std::int64_t>(t.pages.size()) == pages_for(t.length),
                     "KvStore::validate: tail slot ", s, " has ", t.pages.size(),
                     " pages for length ", t.length);
      for (std::int32_t p : t.pages) claim(p, tail_owner(static_cast<std::uint32_t>(s)));
    }
    for (std::int32_t p : free_pages_) claim(p, kFreeListed);
    for (std::int64_t p = 0; p < config_.num_pages; ++p) {
      LAZYATTN_CHECK(owner[p] != kFree, "KvStore::validate: page ", p, " leaked");
      std::int32_t expected = owner[p] == kFreeListed ? kFree : owner[p];
      LAZYATTN_CHECK(page_owner_[p] == expected, "KvStore::validate: page ", p,
                     " owner table disagrees");
    }
  }

 private:
  static constexpr std::int32_t kFree = -1;
  static constexpr std::int32_t kFreeListed = -2;
  static constexpr std::size_t kMaxSlots = 0x7fffffff;

  struct IndexKey {
    DocKey key;
    StorageForm form;
    friend bool operator==(const IndexKey&, const IndexKey&) = default;
  };
  struct IndexKeyHash {
    std::size_t operator()(const IndexKey& k) const noexcept {
      return DocKeyHash{}(k.key) ^ static_cast<std::size_t>(k.form);
    }
  };
  struct Doc {
    bool live = false;
    bool committed = false;
    std::uint32_t generation = 0;
    DocKey key;
    StorageForm form = StorageForm::kRaw;
    std::int64_t length = 0;
    std::int32_t pins = 0;
    std::uint64_t last_use = 0;
    std::vector<std::int32_t> pages;
  };
  struct Tail {
    bool live = false;
    std::uint32_t generation = 0;
    StorageForm form = StorageForm::kLocal;
    std::int64_t length = 0;
    std::vector<std::int32_t> pages;
  };

  // Page owners: documents as slot, tails as -3 - slot.
  static std::int32_t doc_owner(std::uint32_t slot) { return static_cast<std::int32_t>(slot); }
  static std::int32_t tail_owner(std::uint32_t slot) { return -3 - static_cast<std::int32_t>(slot); }

  template <class T>
  void check_type(const char* where) const {
    LAZYATTN_CHECK(dtype_of<T>() == config_.dtype, where, ": element type ",
                   to_string(dtype_of<T>()), ", expected the store's ", to_string(config_.dtype));
  }

  void check_length(const char* where, std::int64_t n) const {
    LAZYATTN_CHECK(n >= 1 && n <= std::numeric_limits<std::int32_t>::max(), where, ": length ", n,
                   ", expected in [1, 2^31 - 1]");
  }

  void check_tokens(const char* where, std::int64_t n, std::size_t k_size, std::size_t v_size) const {
    check_length(where, n);
    std::size_t expected = static_cast<std::size_t>(config_.num_layers) * static_cast<std::size_t>(n) *
                           static_cast<std::size_t>(config_.num_kv_heads) *
                           static_cast<std::size_t>(config_.head_dim);
    LAZYATTN_CHECK(k_size == expected, where, ": k has ", k_size, " elements, expected ", expected,
                   " = [num_layers ", config_.num_layers, ", length ", n, ", num_kv_heads ",
                   config_.num_kv_heads, ", head_dim ", config_.head_dim, "]");
    LAZYATTN_CHECK(v_size == expected, where, ": v has ", v_size, " elements, expected ", expected,
                   " = [num_layers ", config_.num_layers, ", length ", n, ", num_kv_heads ",
                   config_.num_kv_heads, ", head_dim ", config_.head_dim, "]");
  }

  Doc& doc_locked(DocHandle h, const char* where) {
    return const_cast<Doc&>(std::as_const(*this).doc_locked(h, where));
  }
  const Doc& doc_locked(DocHandle h, const char* where) const {
    LAZYATTN_CHECK(h.slot < docs_.size(), where, ": ", h, " names no document slot (",
                   docs_.size(), " slots)");
    const Doc& d = docs_[h.slot];
    LAZYATTN_CHECK(d.live && d.generation == h.generation, where, ": stale document handle ", h,
                   d.live ? ", the slot now holds generation " : ", the slot is empty at generation ",
                   d.generation);
    return d;
  }
  Tail& tail_locked(TailHandle h, const char* where) {
    return const_cast<Tail&>(std::as_const(*this).tail_locked(h, where));
  }
  const Tail& tail_locked(TailHandle h, const char* where) const {
    LAZYATTN_CHECK(h.slot < tails_.size(), where, ": ", h, " names no tail slot (", tails_.size(),
                   " slots)");
    const Tail& t = tails_[h.slot];
    LAZYATTN_CHECK(t.live && t.generation == h.generation, where, ": stale tail handle ", h,
                   ", the slot is at generation ", t.generation);
    return t;
  }

  void pin_locked(std::uint32_t slot, Doc& d) {
    if (d.pins == 0) {
      lru_.erase({d.last_use, slot});
      ++stats_.pinned_documents;
    }
    ++d.pins;
  }

  void touch_locked(std::uint32_t slot, Doc& d) {
    bool in_lru = d.pins == 0;
    if (in_lru) lru_.erase({d.last_use, slot});
    d.last_use = ++clock_;
    if (in_lru) lru_.insert({d.last_use, slot});
  }

  void free_page_locked(std::int32_t p) {
    page_owner_[p] = kFree;
    free_pages_.push_back(p);
  }

  void remove_doc_locked(std::uint32_t slot) {
    Doc& d = docs_[slot];
    if (d.pins == 0) lru_.erase({d.last_use, slot});
    index_.erase(IndexKey{d.key, d.form});
    for (std::int32_t p : d.pages) free_page_locked(p);
    d.pages.clear();
    d.live = false;
    d.committed = false;
    ++d.generation;
    free_doc_slots_.push_back(slot);
    --stats_.documents;
  }

  // Makes `needed` pages free, evicting least recently used unpinned documents, or throws with
  // nothing changed. `where` names the caller for the message.
  void make_room_locked(std::int64_t needed, const char* where) {
    auto free_now = static_cast<std::int64_t>(free_pages_.size());
    if (free_now >= needed) return;
    std::int64_t evictable = 0;
    for (const auto& [tick, slot] : lru_) evictable += static_cast<std::int64_t>(docs_[slot].pages.size());
    LAZYATTN_CHECK(free_now + evictable >= needed, where, ": store full: need ", needed,
                   " pages, ", free_now, " free and ", evictable,
                   " held by unpinned documents, of ", config_.num_pages, " pages");
    while (static_cast<std::int64_t>(free_pages_.size()) < needed) {
      std::uint32_t victim = lru_.begin()->second;
      remove_doc_locked(victim);
      ++stats_.evictions;
    }
  }

  std::vector<std::int32_t> take_pages_locked(std::int64_t count, std::int32_t owner) {
    std::vector<std::int32_t> pages(static_cast<std::size_t>(count));
    for (auto& p : pages) {
      p = free_pages_.back();
      free_pages_.pop_back();
      page_owner_[p] = owner;
    }
    return pages;
  }

  InsertResult allocate_locked(const DocKey& key, StorageForm form, std::int64_t length, bool pin,
                               const char* where) {
    auto it = index_.find(IndexKey{key, form});
    if (it != index_.end()) {
      Doc& d = docs_[it->second];
      LAZYATTN_CHECK(d.length == length, where, ": key ", key, " is stored with length ", d.length,
                     ", got length ", length, " (same key, different content?)");
      ++stats_.dedupes;
      if (pin) pin_locked(it->second, d);
      touch_locked(it->second, d);
      return InsertResult{DocHandle{it->second, d.generation}, false};
    }
    LAZYATTN_CHECK(free_doc_slots_.size() > 0 || docs_.size() < kMaxSlots, where, ": ",
                   docs_.size(), " document slots in use, expected fewer than ", kMaxSlots);
    std::int64_t needed = pages_for(length);
    make_room_locked(needed, where);
    std::uint32_t slot;
    if (!free_doc_slots_.empty()) {
      slot = free_doc_slots_.back();
      free_doc_slots_.pop_back();
    } else {
      slot = static_cast<std::uint32_t>(docs_.size());
      docs_.emplace_back();
    }
    Doc& d = docs_[slot];
    d.live = true;
    d.committed = false;
    d.key = key;
    d.form = form;
    d.length = length;
    d.pins = 0;
    d.pages = take_pages_locked(needed, doc_owner(slot));
    d.last_use = ++clock_;
    lru_.insert({d.last_use, slot});
    if (pin) pin_locked(slot, d);
    index_.emplace(IndexKey{key, form}, slot);
    ++stats_.inserts;
    ++stats_.documents;
    return InsertResult{DocHandle{slot, d.generation}, true};
  }

  std::int64_t reserve_locked(TailHandle h, std::int64_t n, const char* where) {
    Tail& t = tail_locked(h, where);
    LAZYATTN_CHECK(t.length + n <= std::numeric_limits<std::int32_t>::max(), where, ": tail length ",
                   t.length, " + ", n, " exceeds 2^31 - 1");
    std::int64_t needed = pages_for(t.length + n) - static_cast<std::int64_t>(t.pages.size());
    make_room_locked(needed, where);
    auto fresh = take_pages_locked(needed, tail_owner(h.slot));
    t.pages.insert(t.pages.end(), fresh.begin(), fresh.end());
    std::int64_t first = t.length;
    t.length += n;
    return first;
  }

  // Copies tokens [first, first + n) of a page list from [num_layers, n, num_kv_heads, head_dim].
  template <StorageElement T>
  void write_tokens(const std::vector<std::int32_t>& pages, std::int64_t first, std::int64_t n,
                    std::span<const T> k, std::span<const T> v) {
    dispatch_dtype(config_.dtype, [&](auto tag) {
      using S = decltype(tag);
      auto* kp = reinterpret_cast<S*>(k_.data());
      auto* vp = reinterpret_cast<S*>(v_.data());
      const int H = config_.num_kv_heads, D = config_.head_dim, P = config_.page_size;
      for (int l = 0; l < config_.num_layers; ++l) {
        for (std::int64_t i = 0; i < n; ++i) {
          std::int64_t tok = first + i;
          std::int32_t page = pages[static_cast<std::size_t>(tok / P)];
          int slot = static_cast<int>(tok % P);
          for (int h = 0; h < H; ++h) {
            std::int64_t src = ((l * n + i) * H + h) * D;
            std::int64_t dst = geometry_.offset(l, page, h, slot);
            for (int d = 0; d < D; ++d) {
              if constexpr (std::is_same_v<S, T>) {
                kp[dst + d] = k[src + d];
                vp[dst + d] = v[src + d];
              } else {
                kp[dst + d] = from_float<S>(to_float(k[src + d]));
                vp[dst + d] = from_float<S>(to_float(v[src + d]));
              }
            }
          }
        }
      }
    });
  }

  KvStoreConfig config_;
  PoolGeometry geometry_;
  std::vector<std::byte> k_;
  std::vector<std::byte> v_;

  mutable std::mutex mu_;
  std::vector<std::int32_t> page_owner_;
  std::vector<std::int32_t> free_pages_;
  std::vector<Doc> docs_;
  std::vector<std::uint32_t> free_doc_slots_;
  std::vector<Tail> tails_;
  std::vector<std::uint32_t> free_tail_slots_;
  std::unordered_map<IndexKey, std::uint32_t, IndexKeyHash> index_;
  std::set<std::pair<std::uint64_t, std::uint32_t>> lru_;  // (last use, slot) of unpinned documents
  std::uint64_t clock_ = 0;
  KvStoreStats stats_;
};

}  // namespace lazyattn
