// KvBookkeeping: the paged store's bookkeeping without K/V memory: documents under content keys
// (dedupe, pins, LRU eviction of unpinned ones when pages run out), the requests' tails, every
// page's owner, handles that detect reuse and name their store (id(): another store's handle is
// refused), a count of removals that plans check against, and statistics. KvStore (store.hpp) adds
// host K/V pools over it; where the K/V live elsewhere (device pools a kernel writes, the C ABI's
// pools) it is used alone, with the same guarantees and no host copy of the pages.
//
// Thread safety: every member function that reads or changes the bookkeeping takes one internal
// mutex, so any mix of calls from several threads is safe; config(), geometry(), page_bytes() and
// pages_for() read only what the constructor fixed and take nothing. A pinned document's pages are
// never reused, so a thread may read the pages of a committed document it has pinned (or of its
// own tail) without holding anything: the pin, taken under the mutex, orders the read after the
// write.
//
// Failures: every mutating call gives the strong guarantee. Inputs are checked, and everything
// that allocates is allocated, before anything changes; a call that throws (lazyattn::Error for a
// bad value, std::bad_alloc) leaves the bookkeeping as it was.
//
// Eviction: least recently used first among unpinned documents (EvictionPolicy::kLru), or among
// the unpinned documents of the probationary segment before those of the protected one
// (kSegmentedLru, types.hpp). A document is "used" when it is inserted or allocated (also as a
// dedupe), found, pinned or unpinned, so a document a request held until just now counts as
// recent, not as old as the call that first pinned it; it is "asked for again" (and protected
// under kSegmentedLru) when a find() hits it or an insert or allocate dedupes to it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv/checks.hpp"
#include "lazyattn/kv/doc_key.hpp"
#include "lazyattn/kv/eviction_order.hpp"
#include "lazyattn/kv/types.hpp"

namespace lazyattn {

namespace detail {

// Store ids: 1, 2, 3, ... in the order stores are made, never 0 and never reused in a process
// (one counter per copy of the library: a C ABI library and a program beside it count apart, and
// exchange no C++ handles).
inline std::uint64_t next_store_id() {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace detail

class KvBookkeeping {
 public:
  // Checks the configuration (check_config): the geometry of the K/V pools the pages index,
  // wherever they live.
  explicit KvBookkeeping(const KvStoreConfig& config)
      : config_(config),
        geometry_(check_config(config)),
        order_(config.eviction, config.num_pages) {
    page_owner_.assign(static_cast<std::size_t>(config.num_pages), kFree);
    free_pages_.reserve(static_cast<std::size_t>(config.num_pages));
    // Hand out low page ids first: reversed, so pop_back() yields 0, 1, 2, ...
    for (std::int64_t p = config.num_pages - 1; p >= 0; --p)
      free_pages_.push_back(static_cast<std::int32_t>(p));
  }

  KvBookkeeping(const KvBookkeeping&) = delete;
  KvBookkeeping& operator=(const KvBookkeeping&) = delete;

  // This store's identity, in every handle it gives (DocHandle::store, TailHandle::store) and in
  // every plan made from it (Plan::store_id): a handle or plan of another store is refused.
  std::uint64_t id() const { return id_; }
  const KvStoreConfig& config() const { return config_; }
  const PoolGeometry& geometry() const { return geometry_; }
  // Bytes one page holds: K and V, every layer and KV head.
  std::int64_t page_bytes() const {
    return 2 * geometry_.page_stride() * geometry_.num_layers * size_of(config_.dtype);
  }
  // Pages that `length` tokens occupy: ceil(length / page_size).
  std::int64_t pages_for(std::int64_t length) const {
    LAZYATTN_CHECK(length >= 0, "KvStore::pages_for: length ", length, ", expected >= 0");
    return length / config_.page_size + (length % config_.page_size != 0 ? 1 : 0);
  }

  // ---- documents ------------------------------------------------------------------------------

  // The document stored under (key, form), if any; counts a hit or a miss. With pin, the returned
  // document is pinned before the lock is dropped, so it cannot be evicted in between. A document
  // that was allocate()d but not yet committed is found too: check info().committed.
  std::optional<DocHandle> find(const DocKey& key, StorageForm form, bool pin = false) {
    detail::check_storage_form("KvStore::find", form);
    std::lock_guard lock(mu_);
    auto it = index_.find(IndexKey{key, form});
    if (it == index_.end()) {
      ++stats_.misses;
      return std::nullopt;
    }
    Doc& d = docs_[it->second];
    DocHandle h{it->second, d.generation, id_};
    if (pin) check_pinnable(h, d, "KvStore::find");
    ++stats_.hits;
    if (pin) pin_locked(h.slot, d);
    touch_locked(h.slot, d);
    order_.protect(h.slot, d, docs_);
    return h;
  }

  // Reserves pages for a document whose K/V the caller writes itself (a device kernel, say) and
  // returns it pinned. Until commit(), plans refuse it. An existing (key, form) is returned as in
  // insert(), pinned, with inserted = false.
  InsertResult allocate(const DocKey& key, StorageForm form, std::int64_t length) {
    detail::check_storage_form("KvStore::allocate", form);
    check_document_length("KvStore::allocate", length);
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
    check_pinnable(h, d, "KvStore::pin");
    pin_locked(h.slot, d);
    touch_locked(h.slot, d);
  }

  void unpin(DocHandle h) {
    std::lock_guard lock(mu_);
    Doc& d = doc_locked(h, "KvStore::unpin");
    LAZYATTN_CHECK(d.pins > 0, "KvStore::unpin: ", h, " has pin count 0, expected > 0");
    const std::uint64_t now = clock_ + 1;
    // The LRU entry is the one allocation: made first, so a failure changes nothing.
    if (d.pins == 1) order_.insert(order_.key(h.slot, now, d.protected_seg));
    clock_ = now;
    d.last_use = now;
    if (--d.pins == 0) {
      --stats_.pinned_documents;
      unpinned_pages_ += static_cast<std::int64_t>(d.pages.size());
      order_.demote_excess(docs_);  // a protected document pinned past the cap can go back now
    }
  }

  // Removes an unpinned document now, returning its pages.
  void erase(DocHandle h) {
    std::lock_guard lock(mu_);
    Doc& d = doc_locked(h, "KvStore::erase");
    LAZYATTN_CHECK(d.pins == 0, "KvStore::erase: ", h, " is pinned ", d.pins, " times, expected 0");
    remove_doc_locked(h.slot);
  }

  // Whether h names a document of this store that is stored now (false for another store's).
  bool is_live(DocHandle h) const {
    std::lock_guard lock(mu_);
    return h.store == id_ && h.slot < docs_.size() && docs_[h.slot].live &&
           docs_[h.slot].generation == h.generation;
  }

  DocInfo info(DocHandle h) const {
    std::lock_guard lock(mu_);
    const Doc& d = doc_locked(h, "KvStore::info");
    return DocInfo{d.key, d.form, d.length, d.pins, d.committed, d.pages, d.last_use};
  }

  // ---- tails ----------------------------------------------------------------------------------

  // A request's private tokens, in the form the caller names: local (K rotated at the tail's own
  // positions 0, 1, ...), raw, or absolute (K rotated at its logical positions). No default: a
  // tail filled in another form than it was made in attends wrongly with no error.
  TailHandle create_tail(StorageForm form) {
    detail::check_storage_form("KvStore::create_tail", form, /*tail=*/true);
    std::lock_guard lock(mu_);
    std::uint32_t slot;
    if (!free_tail_slots_.empty()) {
      slot = free_tail_slots_.back();
      free_tail_slots_.pop_back();
    } else {
      LAZYATTN_CHECK(tails_.size() < kMaxTailSlots, "KvStore::create_tail: ", tails_.size(),
                     " tail slots exist, expected fewer than ", kMaxTailSlots);
      // Room for this slot's later release first (see remove_doc_locked), then the slot.
      reserve_one_more(tails_);
      reserve_slots(free_tail_slots_, tails_.capacity());
      slot = static_cast<std::uint32_t>(tails_.size());
      tails_.emplace_back();
    }
    Tail& t = tails_[slot];
    t.live = true;
    t.form = form;
    t.length = 0;
    t.pages.clear();
    ++stats_.tails;
    return TailHandle{slot, t.generation, id_};
  }

  // Extends a tail by n tokens whose K/V the caller writes itself; returns the old length, the
  // index of the first new token.
  std::int64_t reserve(TailHandle h, std::int64_t n) {
    detail::check_token_count("KvStore::reserve", "n", n);
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
    // A slot whose generation would wrap is retired, so no stale handle can ever match again.
    if (++t.generation != kRetiredGeneration) free_tail_slots_.push_back(h.slot);
    --stats_.tails;
    ++removals_;
  }

  bool is_live(TailHandle h) const {
    std::lock_guard lock(mu_);
    return h.store == id_ && h.slot < tails_.size() && tails_[h.slot].live &&
           tails_[h.slot].generation == h.generation;
  }

  TailInfo info(TailHandle h) const {
    std::lock_guard lock(mu_);
    const Tail& t = tail_locked(h, "KvStore::info");
    return TailInfo{t.form, t.length, t.pages};
  }

  // ---- accounting -----------------------------------------------------------------------------

  // How many documents were removed (evicted or erased) and tails released so far: while it stays
  // the same, every handle that was live is still live, with the same pages. A plan records it
  // (Plan::store_removals), so that checking the plan at use costs nothing when nothing was
  // removed since (check_plan_current).
  std::uint64_t removals() const {
    std::lock_guard lock(mu_);
    return removals_;
  }

  KvStoreStats stats() const {
    std::lock_guard lock(mu_);
    KvStoreStats s = stats_;
    s.pages_total = config_.num_pages;
    s.pages_in_use = config_.num_pages - static_cast<std::int64_t>(free_pages_.size());
    s.bytes_in_use = s.pages_in_use * page_bytes();
    return s;
  }

  // Checks the bookkeeping: every page is free or owned by exactly the document or tail whose page
  // list holds it, page lists match lengths, the LRU set holds exactly the unpinned documents, the
  // index, the free slot lists and the counters agree with the slots. Throws lazyattn::Error
  // naming the first inconsistency. For tests; O(pages + documents + tails). Defined in
  // kv/bookkeeping_validate.hpp.
  void validate() const;
  // A 64-bit hash of all that decides what the bookkeeping does next: stores given the same calls
  // in the same order have equal ones, whatever their ids (kv/bookkeeping_fingerprint.hpp).
  std::uint64_t fingerprint() const;

 protected:
  static constexpr std::int64_t kMaxLength = detail::kMaxTokens;

  // KvStore's insert(): allocate() and the copy of the document's K/V into its pages as one call
  // under the lock, then committed. fill(pages) must not throw: everything that could fail was
  // checked and allocated before it runs. A dedupe returns without calling it.
  template <class Fill>
  InsertResult allocate_and_fill(const DocKey& key, StorageForm form, std::int64_t length, bool pin,
                                 const char* where, Fill&& fill) {
    std::lock_guard lock(mu_);
    InsertResult r = allocate_locked(key, form, length, pin, where);
    if (!r.inserted) return r;
    Doc& d = docs_[r.handle.slot];
    fill(std::as_const(d.pages));
    d.committed = true;
    return r;
  }

  // KvStore's append(): reserve() and the copy of the new tokens' K/V, as one call under the
  // lock. fill(pages, first) writes tokens [first, first + n); it must not throw.
  template <class Fill>
  void reserve_and_fill(TailHandle h, std::int64_t n, const char* where, Fill&& fill) {
    std::lock_guard lock(mu_);
    const std::int64_t first = reserve_locked(h, n, where);
    fill(std::as_const(tails_[h.slot].pages), first);
  }

  // A document longer than the whole pool can never be stored, however much is evicted.
  void check_document_length(const char* where, std::int64_t length) const {
    detail::check_token_count(where, "length", length);
    LAZYATTN_CHECK(pages_for(length) <= config_.num_pages, where, ": length ", length, " needs ",
                   pages_for(length), " pages, expected at most the store's num_pages ",
                   config_.num_pages);
  }

 private:
  static constexpr std::int32_t kFree = -1;
  static constexpr std::int32_t kFreeListed = -2;
  static constexpr std::size_t kMaxDocSlots = 0x7fffffff;
  // Tails own pages as -3 - slot, which must stay representable in int32.
  static constexpr std::size_t kMaxTailSlots = 0x7ffffffd;
  static constexpr std::uint32_t kRetiredGeneration = std::numeric_limits<std::uint32_t>::max();

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
    bool protected_seg = false;  // kSegmentedLru: in the protected segment
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
  static std::int32_t tail_owner(std::uint32_t slot) {
    return -3 - static_cast<std::int32_t>(slot);
  }

  // validate()'s check of a free-slot list (bookkeeping_validate.hpp).
  template <class Slot>
  void check_free_slots(const std::vector<Slot>& slots, const std::vector<std::uint32_t>& free,
                        std::int64_t live_or_retired, const char* what) const;

  void check_pinnable(DocHandle h, const Doc& d, const char* where) const {
    LAZYATTN_CHECK(d.pins < std::numeric_limits<std::int32_t>::max(), where, ": ", h, " is pinned ",
                   d.pins, " times, expected fewer than 2^31 - 1");
  }

  Doc& doc_locked(DocHandle h, const char* where) {
    return const_cast<Doc&>(std::as_const(*this).doc_locked(h, where));
  }
  // Another store's handle is refused before its slot is looked at: the slot would name one of
  // this store's documents.
  void check_store(std::uint64_t store, const char* where, const auto& h) const {
    LAZYATTN_CHECK(store == id_, where, ": ", h,
                   store == 0 ? " is no store's handle (store 0: a default or hand-made handle)"
                              : " is a handle of another store",
                   ", expected one of this store (store ", id_, ")");
  }
  const Doc& doc_locked(DocHandle h, const char* where) const {
    check_store(h.store, where, h);
    LAZYATTN_CHECK(h.slot < docs_.size(), where, ": ", h, " names no document slot (", docs_.size(),
                   " slots)");
    const Doc& d = docs_[h.slot];
    LAZYATTN_CHECK(
        d.live && d.generation == h.generation, where, ": stale document handle ", h,
        d.live ? ", the slot now holds generation " : ", the slot is empty at generation ",
        d.generation);
    return d;
  }
  Tail& tail_locked(TailHandle h, const char* where) {
    return const_cast<Tail&>(std::as_const(*this).tail_locked(h, where));
  }
  const Tail& tail_locked(TailHandle h, const char* where) const {
    check_store(h.store, where, h);
    LAZYATTN_CHECK(h.slot < tails_.size(), where, ": ", h, " names no tail slot (", tails_.size(),
                   " slots)");
    const Tail& t = tails_[h.slot];
    LAZYATTN_CHECK(
        t.live && t.generation == h.generation, where, ": stale tail handle ", h,
        t.live ? ", the slot now holds generation " : ", the slot is empty at generation ",
        t.generation);
    return t;
  }

  void pin_locked(std::uint32_t slot, Doc& d) {
    if (d.pins == 0) {
      order_.erase(order_.key(slot, d));
      unpinned_pages_ -= static_cast<std::int64_t>(d.pages.size());
      ++stats_.pinned_documents;
    }
    ++d.pins;
  }

  // Moves a document to the most recent end of the LRU by re-keying its node (extract, insert):
  // nothing is allocated, so a touch cannot fail half way.
  void touch_locked(std::uint32_t slot, Doc& d) noexcept {
    const std::uint64_t now = ++clock_;
    if (d.pins == 0) order_.rekey(order_.key(slot, d), order_.key(slot, now, d.protected_seg));
    d.last_use = now;
  }

  void free_page_locked(std::int32_t p) noexcept {
    page_owner_[p] = kFree;
    free_pages_.push_back(p);
  }

  // Allocates nothing: the free lists have room for every slot and page (reserved as the slot
  // vectors grow, and for num_pages at construction), so evictions inside a call that must not
  // fail half way cannot throw.
  void remove_doc_locked(std::uint32_t slot) noexcept {
    Doc& d = docs_[slot];
    if (d.pins == 0) {
      order_.erase(order_.key(slot, d));
      unpinned_pages_ -= static_cast<std::int64_t>(d.pages.size());
    } else {
      --stats_.pinned_documents;
    }
    order_.forget(d);
    index_.erase(IndexKey{d.key, d.form});
    for (std::int32_t p : d.pages) free_page_locked(p);
    d.pages.clear();
    d.live = false;
    d.committed = false;
    d.pins = 0;
    // A slot whose generation would wrap is retired, so no stale handle can ever match again.
    if (++d.generation != kRetiredGeneration) free_doc_slots_.push_back(slot);
    --stats_.documents;
    ++removals_;
  }

  // Capacity for one more element, growing geometrically (so that a run of inserts stays linear).
  template <class V>
  static void reserve_one_more(V& v) {
    if (v.size() == v.capacity()) v.reserve(std::max<std::size_t>(8, 2 * v.capacity()));
  }
  // A free-slot list never outgrows the slot vector: room for all of them means a release or an
  // eviction never allocates.
  static void reserve_slots(std::vector<std::uint32_t>& free, std::size_t slots) {
    if (free.capacity() < slots) free.reserve(slots);
  }

  // Throws, with nothing changed, unless `needed` pages can be made free. `where` names the
  // caller for the message.
  void check_room_locked(std::int64_t needed, const char* where) const {
    auto free_now = static_cast<std::int64_t>(free_pages_.size());
    LAZYATTN_CHECK(free_now + unpinned_pages_ >= needed, where, ": store full: need ", needed,
                   " pages, ", free_now, " free and ", unpinned_pages_,
                   " held by unpinned documents, of ", config_.num_pages, " pages");
  }

  // Makes `needed` pages free (check_room_locked passed), evicting least recently used unpinned
  // documents; allocates nothing. The LRU holds unpinned documents only, and a victim is checked
  // once more: an inconsistent store stops here rather than evict a pinned document.
  void make_room_locked(std::int64_t needed) {
    while (static_cast<std::int64_t>(free_pages_.size()) < needed) {
      LAZYATTN_CHECK(!order_.empty(), "KvStore: internal error: ",
                     needed - static_cast<std::int64_t>(free_pages_.size()),
                     " more pages needed and no unpinned document left to evict");
      const std::uint32_t victim = order_.first_slot();
      LAZYATTN_CHECK(docs_[victim].live && docs_[victim].pins == 0,
                     "KvStore: internal error: the LRU names document slot ", victim,
                     ", which is pinned or empty");
      remove_doc_locked(victim);
      ++stats_.evictions;
    }
  }

  // Moves `count` free pages to `owner`, appended to `pages`, whose capacity the caller reserved
  // (so this allocates nothing).
  void take_pages_locked(std::int64_t count, std::int32_t owner,
                         std::vector<std::int32_t>& pages) noexcept {
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int32_t p = free_pages_.back();
      free_pages_.pop_back();
      page_owner_[p] = owner;
      pages.push_back(p);
    }
  }

  InsertResult allocate_locked(const DocKey& key, StorageForm form, std::int64_t length, bool pin,
                               const char* where) {
    auto it = index_.find(IndexKey{key, form});
    if (it != index_.end()) {
      Doc& d = docs_[it->second];
      DocHandle h{it->second, d.generation, id_};
      LAZYATTN_CHECK(d.length == length, where, ": key ", key, " (", to_string(form),
                     ") is stored with length ", d.length, ", got length ", length,
                     " (same key, different content?)");
      if (pin) check_pinnable(h, d, where);
      ++stats_.dedupes;
      if (pin) pin_locked(h.slot, d);
      touch_locked(h.slot, d);
      order_.protect(h.slot, d, docs_);
      return InsertResult{h, false};
    }
    LAZYATTN_CHECK(!free_doc_slots_.empty() || docs_.size() < kMaxDocSlots, where, ": ",
                   docs_.size(), " document slots in use, expected fewer than ", kMaxDocSlots);
    const std::int64_t needed = pages_for(length);
    check_room_locked(needed, where);
    // Everything that allocates, before anything changes (the strong guarantee): room for one
    // more slot (and for its later release in the free list), the page list, the LRU node and
    // the index node, made detached and given their values once the slot is known.
    reserve_one_more(docs_);
    reserve_slots(free_doc_slots_, docs_.capacity());
    std::vector<std::int32_t> pages;
    pages.reserve(static_cast<std::size_t>(needed));
    auto lru_node = detail::EvictionOrder::spare();
    index_.reserve(index_.size() + 1);
    decltype(index_) index_spare{{IndexKey{key, form}, 0}};
    auto index_node = index_spare.extract(index_spare.begin());
    // Nothing below allocates.
    make_room_locked(needed);
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
    take_pages_locked(needed, doc_owner(slot), pages);
    d.pages = std::move(pages);
    d.last_use = ++clock_;
    d.protected_seg = false;
    order_.insert(std::move(lru_node), order_.key(slot, d));
    unpinned_pages_ += needed;
    if (pin) pin_locked(slot, d);
    index_node.mapped() = slot;
    index_.insert(std::move(index_node));
    ++stats_.inserts;
    ++stats_.documents;
    return InsertResult{DocHandle{slot, d.generation, id_}, true};
  }

  std::int64_t reserve_locked(TailHandle h, std::int64_t n, const char* where) {
    Tail& t = tail_locked(h, where);
    LAZYATTN_CHECK(t.length + n <= kMaxLength, where, ": ", h, " length ", t.length, " + n ", n,
                   " exceeds 2^31 - 1");
    std::int64_t needed = pages_for(t.length + n) - static_cast<std::int64_t>(t.pages.size());
    check_room_locked(needed, where);
    t.pages.reserve(t.pages.size() + static_cast<std::size_t>(needed));  // the one allocation
    make_room_locked(needed);
    take_pages_locked(needed, tail_owner(h.slot), t.pages);
    std::int64_t first = t.length;
    t.length += n;
    return first;
  }

  const std::uint64_t id_ = detail::next_store_id();
  KvStoreConfig config_;
  PoolGeometry geometry_;

  mutable std::mutex mu_;
  std::vector<std::int32_t> page_owner_;
  std::vector<std::int32_t> free_pages_;
  std::vector<Doc> docs_;
  std::vector<std::uint32_t> free_doc_slots_;
  std::vector<Tail> tails_;
  std::vector<std::uint32_t> free_tail_slots_;
  std::unordered_map<IndexKey, std::uint32_t, IndexKeyHash> index_;
  detail::EvictionOrder order_;  // the unpinned documents, in eviction order
  std::int64_t unpinned_pages_ = 0;  // pages of the documents in order_: what eviction could free
  std::uint64_t clock_ = 0;
  std::uint64_t removals_ = 0;  // documents removed and tails released: see removals()
  KvStoreStats stats_;
};

}  // namespace lazyattn

// validate(), out of line: the invariants are their own idea, and this header stays the
// bookkeeping.
#include "lazyattn/kv/bookkeeping_validate.hpp"  // IWYU pragma: export
#include "lazyattn/kv/bookkeeping_fingerprint.hpp"  // IWYU pragma: export
