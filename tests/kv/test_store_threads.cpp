// Concurrency tests of KvStore: writers inserting, finding, pinning, erasing and appending at once,
// and readers reading pinned documents' pages through the pool pointers while others evict.
#include <fmt/format.h>

#include <atomic>
#include "support/catch.hpp"
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv/store_contents.hpp"
#include "lazyattn/kv.hpp"

using namespace lazyattn;
namespace tk = lazyattn::test::kv;

namespace {

constexpr int kKeys = 30;

// Everything about a document follows from (key id, form), so any thread can check any document.
struct SharedDocs {
  std::int64_t scale = 1;
  std::int64_t length(int id) const { return scale * (1 + (id * 7) % 13); }
  DocKey key(int id) const { return DocKey{0x7415ull, static_cast<std::uint64_t>(id)}; }
  tk::ContentSpec spec(int id, StorageForm f) const {
    // Raw documents come as float, local ones as bf16, so both conversion paths run.
    return {static_cast<std::uint64_t>(100 + 2 * id + static_cast<int>(f)),
            f == StorageForm::kRaw ? DType::kFloat32 : DType::kBFloat16};
  }
};

// The first failure any thread saw; Catch assertions stay on the main thread.
struct Failures {
  std::atomic<int> count{0};
  std::mutex mu;
  std::string first;
  void add(std::string msg) {
    if (count.fetch_add(1) == 0) {
      std::lock_guard lock(mu);
      first = std::move(msg);
    }
  }
};

bool contains(const Error& e, const char* needle) {
  return std::string(e.what()).find(needle) != std::string::npos;
}

// Reads a pinned document's pages and checks them; the caller holds the pin.
void check_pinned(const KvStore& store, DocHandle h, int id, StorageForm f, const SharedDocs& docs,
                  Failures& failures) {
  DocInfo info = store.info(h);  // pinned: cannot be stale
  if (!info.committed) return;   // another thread is still writing it (allocate, then commit)
  if (info.length != docs.length(id)) {
    failures.add(
        fmt::format("document {} has length {}, expected {}", id, info.length, docs.length(id)));
    return;
  }
  std::string bad = tk::check_contents(store, info.pages, docs.spec(id, f), 0, info.length);
  if (!bad.empty()) failures.add(fmt::format("document {}: {}", id, bad));
}

}  // namespace

TEST_CASE("KvStore stays consistent with several threads writing and reading at once",
          "[kv][store][threads]") {
  KvStoreConfig cfg;
  cfg.num_layers = 2;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 8;
  cfg.page_size = 4;
  cfg.dtype = DType::kBFloat16;
  cfg.num_pages = 40;
  KvStore store(cfg);
  SharedDocs docs;
  Failures failures;
  constexpr int kWriters = 4;
  constexpr int kReaders = 2;
  constexpr int kOpsPerWriter = 3000;
  std::atomic<std::int64_t> finds{0}, erases{0}, store_full{0}, reads{0};
  std::atomic<int> writers_left{kWriters};
  std::vector<TailHandle> final_tails(kWriters);
  std::vector<tk::ContentSpec> final_specs(kWriters);
  std::vector<std::int64_t> final_lengths(kWriters);

  auto writer = [&](int w) {
    std::mt19937_64 rng(0xabc0 + w);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::uint64_t tail_seed = 1'000'000 + 1000 * static_cast<std::uint64_t>(w);
    tk::ContentSpec tail_spec{tail_seed, DType::kFloat16};
    TailHandle tail = store.create_tail(StorageForm::kLocal);
    std::int64_t tail_length = 0;
    for (int op = 0; op < kOpsPerWriter && failures.count == 0; ++op) {
      int id = uniform(0, kKeys - 1);
      StorageForm f = uniform(0, 1) ? StorageForm::kRaw : StorageForm::kLocal;
      try {
        switch (uniform(0, 7)) {
          case 0: {  // insert, sometimes pinned, then read what came back
            bool pin = uniform(0, 1);
            InsertResult r =
                tk::insert_spec(store, docs.key(id), f, docs.length(id), docs.spec(id, f), pin);
            if (pin) {
              check_pinned(store, r.handle, id, f, docs, failures);
              store.unpin(r.handle);
            }
            break;
          }
          case 1: {  // allocate, write through the pool, commit
            InsertResult r = store.allocate(docs.key(id), f, docs.length(id));
            if (r.inserted) {
              tk::write_through_pool(store, store.info(r.handle).pages, docs.spec(id, f), 0,
                                     docs.length(id));
              store.commit(r.handle);
            }
            store.unpin(r.handle);
            break;
          }
          case 2: {  // find pinned and read
            ++finds;
            if (auto h = store.find(docs.key(id), f, true)) {
              check_pinned(store, *h, id, f, docs, failures);
              store.unpin(*h);
            }
            break;
          }
          case 3: {  // find unpinned, then pin: the document may be gone in between
            ++finds;
            if (auto h = store.find(docs.key(id), f)) {
              try {
                store.pin(*h);
              } catch (const Error& e) {
                if (!contains(e, "stale document handle")) throw;
                break;
              }
              check_pinned(store, *h, id, f, docs, failures);
              store.unpin(*h);
            }
            break;
          }
          case 4: {  // erase: may be gone already or pinned by another thread
            ++finds;
            if (auto h = store.find(docs.key(id), f)) {
              try {
                store.erase(*h);
                ++erases;
              } catch (const Error& e) {
                if (!contains(e, "stale document handle") && !contains(e, "is pinned")) throw;
              }
            }
            break;
          }
          case 5:
          case 6: {  // append to this thread's tail; a full store leaves it as it was
            std::int64_t n = uniform(1, 6);
            try {
              tk::append_spec(store, tail, tail_length, n, tail_spec);
              tail_length += n;
            } catch (const Error& e) {
              if (!contains(e, "store full")) throw;
              ++store_full;
            }
            TailInfo info = store.info(tail);
            if (info.length != tail_length) {
              failures.add(fmt::format("writer {} tail has length {}, expected {}", w, info.length,
                                       tail_length));
            }
            std::string bad = tk::check_contents(store, info.pages, tail_spec, 0, tail_length);
            if (!bad.empty()) failures.add(fmt::format("writer {} tail: {}", w, bad));
            break;
          }
          default: {  // release and start a new tail
            store.release(tail);
            tail = store.create_tail(StorageForm::kLocal);
            tail_spec.seed = ++tail_seed;
            tail_length = 0;
            break;
          }
        }
      } catch (const Error& e) {
        if (contains(e, "store full")) {
          ++store_full;
        } else {
          failures.add(
              fmt::format("writer {} op {}: unexpected lazyattn::Error: {}", w, op, e.what()));
        }
      }
    }
    final_tails[w] = tail;
    final_specs[w] = tail_spec;
    final_lengths[w] = tail_length;
    --writers_left;
  };

  // Readers hold a pin across several passes over the pages while writers evict around them.
  auto reader = [&](int r) {
    std::mt19937_64 rng(0xdef0 + r);
    while (writers_left > 0 && failures.count == 0) {
      int id = static_cast<int>(rng() % kKeys);
      StorageForm f = rng() % 2 ? StorageForm::kRaw : StorageForm::kLocal;
      ++finds;
      if (auto h = store.find(docs.key(id), f, true)) {
        for (int pass = 0; pass < 3; ++pass) check_pinned(store, *h, id, f, docs, failures);
        ++reads;
        store.unpin(*h);
      }
    }
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) threads.emplace_back(writer, w);
  for (int r = 0; r < kReaders; ++r) threads.emplace_back(reader, r);
  for (auto& t : threads) t.join();

  INFO(failures.first);
  REQUIRE(failures.count == 0);
  REQUIRE_NOTHROW(store.validate());

  KvStoreStats s = store.stats();
  INFO(fmt::format("finds {} erases {} evictions {} store_full {} reads {} documents {}",
                   finds.load(), erases.load(), s.evictions, store_full.load(), reads.load(),
                   s.documents));
  CHECK(s.pinned_documents == 0);
  CHECK(s.tails == kWriters);
  CHECK(s.hits + s.misses == finds);
  CHECK(s.inserts - s.evictions - erases == s.documents);
  // The run must have been contended enough to evict under the readers' feet.
  CHECK(s.evictions > 0);
  CHECK(reads > 0);

  // Every surviving document and tail holds exactly its contents; pages add up.
  std::int64_t pages = 0;
  std::int64_t found = 0;
  for (int id = 0; id < kKeys; ++id) {
    for (StorageForm f : {StorageForm::kRaw, StorageForm::kLocal}) {
      auto h = store.find(docs.key(id), f);
      if (!h) continue;
      ++found;
      DocInfo info = store.info(*h);
      CHECK(info.committed);
      CHECK(info.pins == 0);
      CHECK(info.length == docs.length(id));
      pages += static_cast<std::int64_t>(info.pages.size());
      std::string bad = tk::check_contents(store, info.pages, docs.spec(id, f), 0, info.length);
      INFO("document " << id << " " << to_string(f));
      CHECK(bad.empty());
    }
  }
  CHECK(found == s.documents);
  for (int w = 0; w < kWriters; ++w) {
    TailInfo info = store.info(final_tails[w]);
    CHECK(info.length == final_lengths[w]);
    pages += static_cast<std::int64_t>(info.pages.size());
    std::string bad = tk::check_contents(store, info.pages, final_specs[w], 0, info.length);
    INFO("tail of writer " << w);
    CHECK(bad.empty());
  }
  CHECK(pages == store.stats().pages_in_use);
}

TEST_CASE("KvStore readers see pinned documents intact while writers churn the pool",
          "[kv][store][threads]") {
  // A small pool and long documents: every insert evicts, so freed pages are rewritten at once.
  KvStoreConfig cfg;
  cfg.num_layers = 1;
  cfg.num_kv_heads = 4;
  cfg.head_dim = 16;
  cfg.page_size = 16;
  cfg.dtype = DType::kFloat32;
  cfg.num_pages = 12;
  KvStore store(cfg);
  SharedDocs docs{4};  // 4..52 tokens, 1..4 pages
  Failures failures;

  // Two documents stay pinned for the whole run: readers read them, writers must never evict them.
  const int pinned_ids[] = {3, 8};
  std::vector<DocHandle> pinned;
  for (int id : pinned_ids) {
    pinned.push_back(tk::insert_spec(store, docs.key(id), StorageForm::kRaw, docs.length(id),
                                     docs.spec(id, StorageForm::kRaw), true)
                         .handle);
  }
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> reads{0};
  auto reader = [&](int r) {
    const float* k = store.k_pool<float>();
    const float* v = store.v_pool<float>();
    const PoolGeometry g = store.geometry();
    // Page lists are fetched once: a pinned document's pages do not move.
    std::vector<std::vector<std::int32_t>> pages;
    for (DocHandle h : pinned) pages.push_back(store.info(h).pages);
    while (!stop && failures.count == 0) {
      for (std::size_t j = 0; j < pinned.size(); ++j) {
        int id = pinned_ids[j];
        tk::ContentSpec spec = docs.spec(id, StorageForm::kRaw);
        // Typed reads straight through the pool pointers, as a CPU kernel would.
        for (std::int64_t i = 0; i < docs.length(id); ++i) {
          std::uint64_t th = tk::token_hash(spec.seed, 0, i);
          for (int h = 0; h < cfg.num_kv_heads; ++h) {
            std::int64_t off =
                g.offset(0, pages[j][i / g.page_size], h, static_cast<int>(i % g.page_size));
            for (int d = 0; d < cfg.head_dim; ++d) {
              if (k[off + d] != tk::source_value(th, 0, h, d) ||
                  v[off + d] != tk::source_value(th, 1, h, d)) {
                failures.add(fmt::format("reader {}: document {} token {} head {} dim {} changed",
                                         r, id, i, h, d));
                return;
              }
            }
          }
        }
        ++reads;
      }
    }
  };
  std::atomic<std::int64_t> inserted{0};
  auto writer = [&](int w) {
    for (int op = 0; op < 1500 && failures.count == 0; ++op) {
      int id = (op * 5 + w * 11) % kKeys;
      if (id == pinned_ids[0] || id == pinned_ids[1]) continue;
      try {
        if (tk::insert_spec(store, docs.key(id), StorageForm::kRaw, docs.length(id),
                            docs.spec(id, StorageForm::kRaw), false)
                .inserted)
          ++inserted;
      } catch (const Error& e) {
        // The pinned documents and other writers' inserts may leave no room for a moment.
        if (!contains(e, "store full")) failures.add(e.what());
      }
    }
  };
  std::vector<std::thread> readers, writers;
  for (int r = 0; r < 2; ++r) readers.emplace_back(reader, r);
  for (int w = 0; w < 2; ++w) writers.emplace_back(writer, w);
  for (auto& t : writers) t.join();
  stop = true;
  for (auto& t : readers) t.join();

  INFO(failures.first);
  REQUIRE(failures.count == 0);
  REQUIRE_NOTHROW(store.validate());
  CHECK(reads > 0);
  CHECK(inserted > 0);
  CHECK(store.stats().evictions > 0);
  for (std::size_t j = 0; j < pinned.size(); ++j) {
    REQUIRE(store.is_live(pinned[j]));
    DocInfo info = store.info(pinned[j]);
    CHECK(info.pins == 1);
    CHECK(tk::check_contents(store, info.pages, docs.spec(pinned_ids[j], StorageForm::kRaw), 0,
                             info.length)
              .empty());
    store.unpin(pinned[j]);
  }
  CHECK(store.stats().pinned_documents == 0);
}
