// Randomized model-based test of KvStore: every operation, valid or not, is checked against a plain
// std::map model of documents, tails, pins, LRU order, statistics and page contents.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include "support/catch.hpp"
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/store_contents.hpp"
#include "lazyattn/kv.hpp"
#include "support/options.hpp"
#include "support/random.hpp"

using namespace lazyattn;
namespace tk = lazyattn::test::kv;

namespace {

// Thrown by the harness on the first disagreement; not a lazyattn::Error, so no expected-error
// handler can swallow it.
struct ModelFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ModelDoc {
  DocKey key;
  StorageForm form = StorageForm::kRaw;
  std::int64_t length = 0;
  std::int32_t pins = 0;
  bool committed = false;
  std::uint64_t last_use = 0;
  bool prot = false;  // EvictionPolicy::kSegmentedLru: in the protected segment
  tk::ContentSpec spec;
  DocHandle handle;
};

struct ModelTail {
  TailHandle handle;
  StorageForm form = StorageForm::kLocal;
  std::int64_t length = 0;
  tk::ContentSpec spec;
};

// How often each interesting path ran, so a run that never reaches one fails instead of passing.
struct Coverage {
  std::int64_t ops = 0, evictions = 0, store_full = 0, dedupes = 0, hits = 0, misses = 0;
  std::int64_t boundary_inserts = 0, invalid = 0, stale = 0, full_checks = 0, appends = 0;
};

using DocId = std::pair<int, int>;  // (key id, form)

class StoreModel {
 public:
  StoreModel(std::uint64_t seed, std::int64_t ops, Coverage& coverage)
      : rng_(seed), seed_(seed), ops_(ops), cov_(coverage) {
    const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    const int page_sizes[] = {1, 2, 4, 16, 16, 16};
    cfg_.dtype = dtypes[uniform(0, 2)];
    cfg_.page_size = page_sizes[uniform(0, 5)];
    cfg_.num_layers = uniform(1, 2);
    cfg_.num_kv_heads = uniform(1, 3);
    cfg_.head_dim = 2 * uniform(1, 4);
    cfg_.num_pages = uniform(6, 40);
    cfg_.eviction = chance(0.5) ? EvictionPolicy::kSegmentedLru : EvictionPolicy::kLru;
    store_ = std::make_unique<KvStore>(cfg_);
    // Lengths of 1..5 pages (never more than the store holds), a third of them exactly on a page
    // boundary; fixed per key, as content-derived keys imply.
    // Few enough keys that finds hit and inserts dedupe, enough that the store overflows.
    num_keys_ = std::max<int>(4, static_cast<int>(cfg_.num_pages) / 2);
    for (int id = 0; id < num_keys_; ++id) {
      std::int64_t pages = std::min<std::int64_t>(uniform(1, 5), cfg_.num_pages);
      std::int64_t last = chance(1.0 / 3) ? cfg_.page_size : uniform(1, cfg_.page_size);
      key_length_.push_back((pages - 1) * cfg_.page_size + last);
      // Half the keys hash token ids, half are the caller's own.
      if (id % 2 == 0) {
        auto tokens = test::random_tokens(static_cast<std::size_t>(key_length_.back()), rng_);
        keys_.push_back(DocKey::from_tokens(tokens));
      } else {
        keys_.push_back(DocKey{0x5eed0000ull + static_cast<std::uint64_t>(id), seed});
      }
    }
  }

  void run() {
    for (op_ = 0; op_ < ops_; ++op_) {
      try {
        step();
      } catch (const Error& e) {
        fail("unexpected lazyattn::Error: {}", e.what());
      }
      check_light();
      if (op_ % kFullCheckPeriod == 0) check_full();
      ++cov_.ops;
    }
    check_full();
  }

 private:
  static constexpr int kMaxTails = 6;
  static constexpr std::int64_t kFullCheckPeriod = 16;

  // ---- randomness ------------------------------------------------------------------------------
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  StorageForm random_form() { return chance(0.5) ? StorageForm::kRaw : StorageForm::kLocal; }
  DType random_dtype() {
    const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    return dtypes[uniform(0, 2)];
  }
  template <class Map>
  typename Map::iterator pick(Map& m) {
    auto it = m.begin();
    std::advance(it, uniform(0, static_cast<int>(m.size()) - 1));
    return it;
  }
  template <class Pred>
  std::optional<DocId> pick_doc(Pred pred) {
    std::vector<DocId> ids;
    for (auto& [id, d] : docs_)
      if (pred(d)) ids.push_back(id);
    if (ids.empty()) return std::nullopt;
    return ids[static_cast<std::size_t>(uniform(0, static_cast<int>(ids.size()) - 1))];
  }

  // ---- failure reporting
  // -------------------------------------------------------------------------
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw ModelFailure(fmt::format(
        "store model seed {} op {} ({}), config layers {} heads {} "
        "head_dim {} page_size {} pages {} {}: {}",
        seed_, op_, op_name_, cfg_.num_layers, cfg_.num_kv_heads, cfg_.head_dim, cfg_.page_size,
        cfg_.num_pages, to_string(cfg_.dtype), fmt::format(f, std::forward<Args>(args)...)));
  }
  void expect(bool ok, const char* what) {
    if (!ok) fail("{}", what);
  }

  // Runs a store call the model says must throw lazyattn::Error naming `needle`, and checks that
  // the statistics did not move (the model did not move either, so check_light agrees).
  template <class F>
  void expect_error(const char* needle, F&& f) {
    ++cov_.invalid;
    KvStoreStats before = store_->stats();
    try {
      f();
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find(needle) == std::string::npos) fail("message \"{}\" lacks \"{}\"", msg, needle);
      expect_same_stats(before, store_->stats());
      return;
    }
    fail("expected lazyattn::Error naming \"{}\", the call succeeded", needle);
  }

  void expect_same_stats(const KvStoreStats& a, const KvStoreStats& b) {
    auto same = [&](const char* name, std::int64_t x, std::int64_t y) {
      if (x != y) fail("stats.{} changed from {} to {} across a failed call", name, x, y);
    };
    same("hits", a.hits, b.hits);
    same("misses", a.misses, b.misses);
    same("inserts", a.inserts, b.inserts);
    same("dedupes", a.dedupes, b.dedupes);
    same("evictions", a.evictions, b.evictions);
    same("documents", a.documents, b.documents);
    same("pinned_documents", a.pinned_documents, b.pinned_documents);
    same("tails", a.tails, b.tails);
    same("pages_in_use", a.pages_in_use, b.pages_in_use);
  }

  // ---- the model -------------------------------------------------------------------------------
  std::int64_t pages_for(std::int64_t n) const { return (n + cfg_.page_size - 1) / cfg_.page_size; }
  std::int64_t pages_used() const {
    std::int64_t used = 0;
    for (auto& [id, d] : docs_) used += pages_for(d.length);
    for (auto& [id, t] : tails_) used += pages_for(t.length);
    return used;
  }
  void touch(ModelDoc& d) { d.last_use = ++clock_; }

  // EvictionPolicy::kSegmentedLru, as types.hpp states it: a document asked for again (a find
  // that hits, a dedupe) is protected; while the protected documents hold more than 80% of the
  // pages, the least recently used unpinned one goes back to probation (also when an unpin
  // makes one of them unpinned).
  void protect(ModelDoc& d) {
    if (cfg_.eviction != EvictionPolicy::kSegmentedLru || d.prot) return;
    d.prot = true;
    protected_pages_ += pages_for(d.length);
    demote();
  }
  void demote() {
    while (protected_pages_ > cfg_.num_pages * 4 / 5) {
      ModelDoc* oldest = nullptr;
      for (auto& [id, d] : docs_)
        if (d.prot && d.pins == 0 && (!oldest || d.last_use < oldest->last_use)) oldest = &d;
      if (!oldest) return;
      oldest->prot = false;
      protected_pages_ -= pages_for(oldest->length);
    }
  }
  void forget(const DocId& id) {
    if (docs_.at(id).prot) protected_pages_ -= pages_for(docs_.at(id).length);
    docs_.erase(id);
  }

  // The documents the store must evict, least recently used unpinned first (probationary before
  // protected ones under kSegmentedLru), to free `needed` pages; nullopt when even evicting
  // every unpinned document would not do.
  std::optional<std::vector<DocId>> victims_for(std::int64_t needed) const {
    std::int64_t free_pages = cfg_.num_pages - pages_used();
    std::vector<std::pair<std::pair<bool, std::uint64_t>, DocId>> lru;
    std::int64_t evictable = 0;
    for (auto& [id, d] : docs_) {
      if (d.pins > 0) continue;
      lru.push_back({{d.prot, d.last_use}, id});
      evictable += pages_for(d.length);
    }
    if (free_pages + evictable < needed) return std::nullopt;
    std::sort(lru.begin(), lru.end());
    std::vector<DocId> out;
    for (std::size_t i = 0; free_pages < needed; ++i) {
      out.push_back(lru[i].second);
      free_pages += pages_for(docs_.at(lru[i].second).length);
    }
    return out;
  }
  void evict(const std::vector<DocId>& victims) {
    for (const DocId& id : victims) {
      DocHandle h = docs_.at(id).handle;
      if (docs_.at(id).pins != 0) fail("the model chose a pinned victim");
      forget(id);
      if (store_->is_live(h))
        fail("{} should have been evicted (least recently used)", fmt::streamed(h));
      dead_docs_.push_back(h);
      ++evictions_;
      ++cov_.evictions;
    }
  }

  // ---- checks ----------------------------------------------------------------------------------
  void check_light() {
    KvStoreStats s = store_->stats();
    std::int64_t pinned = 0;
    for (auto& [id, d] : docs_) pinned += d.pins > 0;
    std::int64_t used = pages_used();
    const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> fields[] = {
        {"hits", {s.hits, hits_}},
        {"misses", {s.misses, misses_}},
        {"inserts", {s.inserts, inserts_}},
        {"dedupes", {s.dedupes, dedupes_}},
        {"evictions", {s.evictions, evictions_}},
        {"documents", {s.documents, static_cast<std::int64_t>(docs_.size())}},
        {"pinned_documents", {s.pinned_documents, pinned}},
        {"tails", {s.tails, static_cast<std::int64_t>(tails_.size())}},
        {"pages_total", {s.pages_total, cfg_.num_pages}},
        {"pages_in_use", {s.pages_in_use, used}},
        {"bytes_in_use", {s.bytes_in_use, used * page_bytes_model()}},
    };
    for (auto& [name, v] : fields)
      if (v.first != v.second) fail("stats.{} is {}, the model says {}", name, v.first, v.second);
    for (auto& [id, d] : docs_)
      if (!store_->is_live(d.handle)) fail("{} should be live", fmt::streamed(d.handle));
    for (auto& [id, t] : tails_)
      if (!store_->is_live(t.handle)) fail("{} should be live", fmt::streamed(t.handle));
    if (!dead_docs_.empty() &&
        store_->is_live(dead_docs_[uniform(0, static_cast<int>(dead_docs_.size()) - 1)]))
      fail("a dead document handle is live again");
    if (!dead_tails_.empty() &&
        store_->is_live(dead_tails_[uniform(0, static_cast<int>(dead_tails_.size()) - 1)]))
      fail("a dead tail handle is live again");
  }
  // Written independently of KvStore::page_bytes: K and V, all layers and heads of one page.
  std::int64_t page_bytes_model() const {
    return 2LL * cfg_.num_layers * cfg_.num_kv_heads * cfg_.page_size * cfg_.head_dim *
           (cfg_.dtype == DType::kFloat32 ? 4 : 2);
  }

  void check_doc(const ModelDoc& d) {
    DocInfo info = store_->info(d.handle);
    if (info.key != d.key || info.form != d.form || info.length != d.length ||
        info.pins != d.pins || info.committed != d.committed ||
        static_cast<std::int64_t>(info.pages.size()) != pages_for(d.length)) {
      fail(
          "info({}) is length {} pins {} committed {} pages {}, the model says length {} pins {} "
          "committed {} pages {}",
          fmt::streamed(d.handle), info.length, info.pins, info.committed, info.pages.size(),
          d.length, d.pins, d.committed, pages_for(d.length));
    }
    for (std::int32_t p : info.pages)
      if (p < 0 || p >= cfg_.num_pages) fail("page id {} out of range", p);
    std::string bad = tk::check_contents(*store_, info.pages, d.spec, 0, d.length);
    if (!bad.empty()) fail("{}: {}", fmt::streamed(d.handle), bad);
  }
  void check_tail(const ModelTail& t, std::int64_t first, std::int64_t n) {
    TailInfo info = store_->info(t.handle);
    if (info.form != t.form || info.length != t.length ||
        static_cast<std::int64_t>(info.pages.size()) != pages_for(t.length)) {
      fail("info({}) is length {} pages {}, the model says length {} pages {}",
           fmt::streamed(t.handle), info.length, info.pages.size(), t.length, pages_for(t.length));
    }
    std::string bad = tk::check_contents(*store_, info.pages, t.spec, first, n);
    if (!bad.empty()) fail("{}: {}", fmt::streamed(t.handle), bad);
  }
  void check_full() {
    ++cov_.full_checks;
    try {
      store_->validate();
    } catch (const Error& e) {
      fail("validate: {}", e.what());
    }
    for (auto& [id, d] : docs_) check_doc(d);
    for (auto& [id, t] : tails_) check_tail(t, 0, t.length);
  }

  // ---- operations ------------------------------------------------------------------------------
  void step() {
    int r = uniform(0, 119);
    if ((r -= 22) < 0) return op_insert(false);
    if ((r -= 14) < 0) return op_find();
    if ((r -= 7) < 0) return op_pin();
    if ((r -= 20) < 0) return op_unpin();
    if ((r -= 5) < 0) return op_erase();
    if ((r -= 5) < 0) return op_insert(true);
    if ((r -= 3) < 0) return op_commit();
    if ((r -= 4) < 0) return op_create_tail();
    if ((r -= 10) < 0) return op_extend_tail(false);
    if ((r -= 3) < 0) return op_extend_tail(true);
    if ((r -= 4) < 0) return op_release();
    return op_invalid();
  }

  void op_insert(bool allocate) {
    op_name_ = allocate ? "allocate" : "insert";
    int key_id = uniform(0, num_keys_ - 1);
    StorageForm form = random_form();
    bool pin = allocate || chance(0.3);
    std::int64_t length = key_length_[key_id];
    // allocate()'s caller writes the store's own element type.
    tk::ContentSpec spec{next_seed_++, allocate ? cfg_.dtype : random_dtype()};
    DocId id{key_id, static_cast<int>(form)};
    auto call = [&] {
      return allocate ? store_->allocate(keys_[key_id], form, length)
                      : tk::insert_spec(*store_, keys_[key_id], form, length, spec, pin);
    };
    if (auto it = docs_.find(id); it != docs_.end()) {
      // A dedupe: the fresh seed's contents must not reach the pool.
      InsertResult r = call();
      if (r.inserted || r.handle != it->second.handle) fail("a dedupe returned a new document");
      ++dedupes_;
      ++cov_.dedupes;
      if (pin) ++it->second.pins;
      touch(it->second);
      protect(it->second);
      check_doc(it->second);
      return;
    }
    auto victims = victims_for(pages_for(length));
    if (!victims) {
      ++cov_.store_full;
      expect_error("store full", call);
      return;
    }
    InsertResult r = call();
    if (!r.inserted) fail("a new key was reported as a dedupe");
    evict(*victims);
    ModelDoc d;
    d.key = keys_[key_id];
    d.form = form;
    d.length = length;
    d.pins = pin ? 1 : 0;
    d.committed = !allocate;
    d.last_use = ++clock_;
    d.spec = spec;
    d.handle = r.handle;
    if (allocate) tk::write_through_pool(*store_, store_->info(r.handle).pages, spec, 0, length);
    docs_[id] = d;
    ++inserts_;
    if (length % cfg_.page_size == 0) ++cov_.boundary_inserts;
    check_doc(d);
  }

  void op_find() {
    op_name_ = "find";
    int key_id = uniform(0, num_keys_ - 1);
    StorageForm form = random_form();
    if (!docs_.empty() && chance(0.5)) {  // half the finds ask for a stored document
      DocId id = pick(docs_)->first;
      key_id = id.first;
      form = static_cast<StorageForm>(id.second);
    }
    bool pin = chance(0.3);
    std::optional<DocHandle> got = store_->find(keys_[key_id], form, pin);
    auto it = docs_.find({key_id, static_cast<int>(form)});
    if (it == docs_.end()) {
      if (got) fail("find returned {} for a key the model does not hold", fmt::streamed(*got));
      ++misses_;
      ++cov_.misses;
      return;
    }
    if (!got || *got != it->second.handle) fail("find missed a stored document");
    ++hits_;
    ++cov_.hits;
    if (pin) ++it->second.pins;
    touch(it->second);
    protect(it->second);
  }

  void op_pin() {
    op_name_ = "pin";
    auto id = pick_doc([](const ModelDoc&) { return true; });
    if (!id) return;
    ModelDoc& d = docs_.at(*id);
    store_->pin(d.handle);
    ++d.pins;
    touch(d);
  }

  void op_unpin() {
    op_name_ = "unpin";
    auto id = pick_doc([](const ModelDoc& d) { return d.pins > 0; });
    if (!id) return;
    ModelDoc& d = docs_.at(*id);
    store_->unpin(d.handle);
    --d.pins;
    touch(d);
    if (d.pins == 0) demote();
  }

  void op_erase() {
    op_name_ = "erase";
    auto id = pick_doc([](const ModelDoc& d) { return d.pins == 0; });
    if (!id) return;
    DocHandle h = docs_.at(*id).handle;
    store_->erase(h);
    forget(*id);
    dead_docs_.push_back(h);
    if (store_->is_live(h)) fail("an erased document is live");
  }

  void op_commit() {
    op_name_ = "commit";
    auto id = pick_doc([](const ModelDoc& d) { return !d.committed; });
    if (!id) id = pick_doc([](const ModelDoc&) { return true; });  // committing twice is allowed
    if (!id) return;
    store_->commit(docs_.at(*id).handle);
    docs_.at(*id).committed = true;
  }

  void op_create_tail() {
    op_name_ = "create_tail";
    if (tails_.size() >= kMaxTails) return op_release();
    ModelTail t;
    t.form = random_form();
    t.spec = tk::ContentSpec{next_seed_++, random_dtype()};
    t.handle = store_->create_tail(t.form);
    tails_[next_tail_id_++] = t;
    check_tail(t, 0, 0);
  }

  // A token count for a tail of length `len`: small, exactly to the next page boundary, or whole
  // pages.
  std::int64_t tail_count(std::int64_t len) {
    switch (uniform(0, 3)) {
      case 0:
        return cfg_.page_size - len % cfg_.page_size;
      case 1:
        return cfg_.page_size * uniform(1, 2);
      default:
        return uniform(1, 2 * cfg_.page_size);
    }
  }

  void op_extend_tail(bool reserve) {
    op_name_ = reserve ? "reserve" : "append";
    if (tails_.empty()) return op_create_tail();
    ModelTail& t = pick(tails_)->second;
    std::int64_t n = tail_count(t.length);
    std::int64_t first = t.length;
    auto victims = victims_for(pages_for(first + n) - pages_for(first));
    auto call = [&] {
      if (reserve) {
        std::int64_t got = store_->reserve(t.handle, n);
        if (got != first) fail("reserve returned {}, expected the old length {}", got, first);
      } else {
        tk::append_spec(*store_, t.handle, first, n, t.spec);
      }
    };
    if (!victims) {
      ++cov_.store_full;
      expect_error("store full", call);
      return;
    }
    call();
    evict(*victims);
    t.length += n;
    if (reserve) tk::write_through_pool(*store_, store_->info(t.handle).pages, t.spec, first, n);
    ++cov_.appends;
    check_tail(t, first, n);
  }

  void op_release() {
    op_name_ = "release";
    if (tails_.empty()) return;
    auto it = pick(tails_);
    TailHandle h = it->second.handle;
    store_->release(h);
    tails_.erase(it);
    dead_tails_.push_back(h);
  }

  // Calls the model says must fail, each leaving store and model as they were.
  void op_invalid() {
    const KvStoreConfig& c = cfg_;
    std::int64_t token_elems = std::int64_t{c.num_layers} * c.num_kv_heads * c.head_dim;
    switch (uniform(0, 11)) {
      case 0: {
        op_name_ = "stale document handle";
        if (dead_docs_.empty()) return;
        ++cov_.stale;
        DocHandle h = dead_docs_[uniform(0, static_cast<int>(dead_docs_.size()) - 1)];
        switch (uniform(0, 4)) {
          case 0:
            return expect_error("stale document handle", [&] { store_->pin(h); });
          case 1:
            return expect_error("stale document handle", [&] { store_->unpin(h); });
          case 2:
            return expect_error("stale document handle", [&] { store_->erase(h); });
          case 3:
            return expect_error("stale document handle", [&] { store_->commit(h); });
          default:
            return expect_error("stale document handle", [&] { store_->info(h); });
        }
      }
      case 1: {
        op_name_ = "stale tail handle";
        if (dead_tails_.empty()) return;
        ++cov_.stale;
        TailHandle h = dead_tails_[uniform(0, static_cast<int>(dead_tails_.size()) - 1)];
        std::vector<float> kv(static_cast<std::size_t>(token_elems), 1.0f);
        switch (uniform(0, 3)) {
          case 0:
            return expect_error("stale tail handle", [&] { store_->append(h, 1, kv, kv); });
          case 1:
            return expect_error("stale tail handle", [&] { store_->reserve(h, 1); });
          case 2:
            return expect_error("stale tail handle", [&] { store_->release(h); });
          default:
            return expect_error("stale tail handle", [&] { store_->info(h); });
        }
      }
      case 2: {
        op_name_ = "unpin at 0";
        auto id = pick_doc([](const ModelDoc& d) { return d.pins == 0; });
        if (!id) return;
        return expect_error("pin count 0", [&] { store_->unpin(docs_.at(*id).handle); });
      }
      case 3: {
        op_name_ = "erase pinned";
        auto id = pick_doc([](const ModelDoc& d) { return d.pins > 0; });
        if (!id) return;
        return expect_error("is pinned", [&] { store_->erase(docs_.at(*id).handle); });
      }
      case 4: {
        op_name_ = "mismatched length";
        auto id = pick_doc([](const ModelDoc&) { return true; });
        if (!id) return;
        const ModelDoc& d = docs_.at(*id);
        std::int64_t wrong = d.length > 1 && chance(0.5) ? d.length - 1 : d.length + 1;
        if (pages_for(wrong) > c.num_pages) wrong = d.length - 1;
        if (wrong < 1) return;
        std::string needle = fmt::format("stored with length {}, got length {}", d.length, wrong);
        if (chance(0.5)) {
          return expect_error(needle.c_str(), [&] { store_->allocate(d.key, d.form, wrong); });
        }
        return expect_error(needle.c_str(), [&] {
          tk::insert_spec(*store_, d.key, d.form, wrong, d.spec, chance(0.5));
        });
      }
      case 5: {
        op_name_ = "longer than the store";
        std::int64_t len = c.num_pages * c.page_size + uniform(1, c.page_size);
        std::string needle = fmt::format("length {} needs", len);
        return expect_error(needle.c_str(), [&] {
          tk::insert_spec(*store_, DocKey{1, 1}, random_form(), len, {1, c.dtype}, false);
        });
      }
      case 6: {
        // Needs more pages than free plus evictable, but no more than the store has.
        op_name_ = "store full";
        std::int64_t avail = cfg_.num_pages - pages_used();
        for (auto& [id, d] : docs_)
          if (d.pins == 0) avail += pages_for(d.length);
        if (avail >= cfg_.num_pages) return;
        ++cov_.store_full;
        std::int64_t n = (avail + 1) * cfg_.page_size;
        if (!tails_.empty() && chance(0.5)) {
          ModelTail& t = pick(tails_)->second;
          n = (pages_for(t.length) + avail + 1) * cfg_.page_size - t.length;  // avail + 1 pages
          if (n > std::int64_t{c.num_pages} * c.page_size) return;
          return expect_error("store full",
                              [&] { tk::append_spec(*store_, t.handle, t.length, n, t.spec); });
        }
        return expect_error("store full", [&] {
          tk::insert_spec(*store_, DocKey{0xf011, next_seed_}, random_form(), n, {2, c.dtype},
                          chance(0.5));
        });
      }
      case 7: {
        op_name_ = "wrong k/v size";
        std::int64_t len = uniform(1, 3);
        std::vector<float> good(static_cast<std::size_t>(token_elems * len), 0.5f);
        std::vector<float> bad(good.size() + (chance(0.5) ? 1 : -1), 0.5f);
        std::string needle = fmt::format("has {} elements, expected {}", bad.size(), good.size());
        if (!tails_.empty() && chance(0.5)) {
          TailHandle h = pick(tails_)->second.handle;
          return expect_error(needle.c_str(), [&] { store_->append(h, len, good, bad); });
        }
        return expect_error(needle.c_str(), [&] {
          store_->insert(keys_[uniform(0, num_keys_ - 1)], random_form(), len, bad, good);
        });
      }
      case 8: {
        op_name_ = "wrong element type";
        DType other = c.dtype == DType::kFloat32 ? DType::kBFloat16 : DType::kFloat32;
        std::string needle = fmt::format("element type {}", to_string(other));
        return dispatch_dtype(other, [&](auto tag) {
          using T = decltype(tag);
          expect_error(needle.c_str(), [&] { (void)store_->k_pool<T>(); });
        });
      }
      case 9: {
        op_name_ = "handle naming no slot";
        DocHandle dh{1u << 30, 0, store_->id()};
        TailHandle th{1u << 30, 0, store_->id()};
        if (store_->is_live(dh) || store_->is_live(th)) fail("a bogus handle is live");
        if (chance(0.5)) return expect_error("names no document slot", [&] { store_->pin(dh); });
        return expect_error("names no tail slot", [&] { store_->reserve(th, 1); });
      }
      case 10: {
        op_name_ = "non-positive length";
        std::int64_t len = -uniform(0, 2);
        std::string needle = fmt::format("length {}, expected", len);
        if (chance(0.5)) {
          return expect_error(needle.c_str(),
                              [&] { store_->allocate(keys_[0], StorageForm::kRaw, len); });
        }
        std::vector<float> none;
        return expect_error(needle.c_str(),
                            [&] { store_->insert(keys_[0], StorageForm::kRaw, len, none, none); });
      }
      default: {
        op_name_ = "non-positive tail count";
        if (tails_.empty()) return;
        TailHandle h = pick(tails_)->second.handle;
        std::int64_t n = -uniform(0, 2);
        std::string needle = fmt::format("n {}, expected", n);
        return expect_error(needle.c_str(), [&] { store_->reserve(h, n); });
      }
    }
  }

  test::Rng rng_;
  std::uint64_t seed_;
  std::int64_t ops_;
  Coverage& cov_;
  KvStoreConfig cfg_;
  std::unique_ptr<KvStore> store_;
  int num_keys_ = 0;
  std::vector<DocKey> keys_;
  std::vector<std::int64_t> key_length_;
  std::map<DocId, ModelDoc> docs_;
  std::map<std::int64_t, ModelTail> tails_;
  std::vector<DocHandle> dead_docs_;
  std::vector<TailHandle> dead_tails_;
  std::int64_t next_tail_id_ = 0;
  std::uint64_t next_seed_ = 1000;
  std::uint64_t clock_ = 0;
  std::int64_t hits_ = 0, misses_ = 0, inserts_ = 0, dedupes_ = 0, evictions_ = 0;
  std::int64_t protected_pages_ = 0;
  std::int64_t op_ = 0;
  const char* op_name_ = "";
};

}  // namespace

TEST_CASE("KvStore agrees with a map-based model over random operations", "[kv][store][model]") {
  const std::int64_t total = test::options().store_ops;
  const std::int64_t per_store = 4000;  // a fresh store (dtype, page size, geometry) per chunk
  Coverage cov;
  std::string failure;
  try {
    for (std::int64_t done = 0, s = 0; done < total; done += per_store, ++s) {
      StoreModel model(0x1a2b3c00u + static_cast<std::uint64_t>(s),
                       std::min(per_store, total - done), cov);
      model.run();
    }
  } catch (const ModelFailure& f) {
    failure = f.what();
  }
  INFO(failure);
  REQUIRE(failure.empty());
  INFO(
      fmt::format("ops {} evictions {} store_full {} dedupes {} hits {} misses {} boundary {} "
                  "invalid {} stale {} appends {} full checks {}",
                  cov.ops, cov.evictions, cov.store_full, cov.dedupes, cov.hits, cov.misses,
                  cov.boundary_inserts, cov.invalid, cov.stale, cov.appends, cov.full_checks));
  CHECK(cov.ops == total);
  // Every path the model covers must actually have run; a tiny --store-ops may not reach them.
  if (total >= 10000) {
    CHECK(cov.evictions > 0);
    CHECK(cov.store_full > 0);
    CHECK(cov.dedupes > 0);
    CHECK(cov.hits > 0);
    CHECK(cov.misses > 0);
    CHECK(cov.boundary_inserts > 0);
    CHECK(cov.stale > 0);
    CHECK(cov.appends > 0);
  }
}
