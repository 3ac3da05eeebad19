// The serving engine: continuous batching over a simulated clock, a KV page budget, a document
// cache shaped by the mode (docs/reproduction.md), and a record of every request.
//
// Time. The clock is simulated and driven by measured costs: requests arrive at their Poisson
// times; each engine step (admission, KV copies, one forward over the batch, bookkeeping) runs for
// real and advances the clock by its measured wall time; an idle engine jumps to the next arrival.
// So the arrival rate is independent of how fast the machine is, and queueing is what a server
// doing the same work at the same speed would see.
//
// A step: every decoding request gives one token; pending document encodings and prefills fill
// the rest of a token budget (at least one item always runs). Documents missing from the cache
// are encoded first, as standalone document requests; their requests prefill in a later step.
//
// Memory. Every page comes from the backend's KvStore. A request is admitted only when the pages
// it may hold at once (documents it pins, its tail at full length, block-attention's private
// copies, prefix blocks it publishes) fit beside what running requests were promised; everything
// else in the store is unpinned cache and can be evicted, so no allocation of an admitted request
// fails.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "lazyattn/kv/doc_key.hpp"
#include "lazyattn/kv/layout.hpp"
#include "lazyattn/kv/plan.hpp"
#include "lazyattn/kv/plan_ops.hpp"
#include "modes.hpp"
#include "workload.hpp"

namespace lazyattn::rag {

struct EngineConfig {
  Mode mode = Mode::kLazy;
  Eviction eviction = Eviction::kLru;
  // kLfu keeps this many cache entries (the most requested so far); a requested document outside
  // them is encoded, used and dropped when no request holds it. The budget must hold these and
  // the running requests' working sets (budget.hpp). Unused by kLru, which caches in all pages.
  std::int64_t lfu_capacity = 0;
  int max_batch = 16;                    // requests running at once
  std::int64_t max_step_tokens = 16384;  // new tokens per step (encodes, prefills, decodes)
  bool record_logits = false;            // keep every generated token's logits (tests)
};

struct RequestRecord {
  int id = 0;
  double arrival = 0, admitted = 0, first_token = 0, finished = 0;  // simulated seconds
  int doc_lookups = 0, doc_hits = 0;
  std::int64_t prompt_tokens = 0;    // documents + question
  std::int64_t computed_tokens = 0;  // prompt tokens this request prefilled itself
  std::int64_t reused_tokens = 0;    // prefix mode: tokens of the reused cached prefix
  std::vector<std::int32_t> tokens;  // generated
  std::vector<float> logits;         // [tokens, vocab] when recorded
};

struct RunResult {
  std::vector<RequestRecord> requests;  // by id
  double duration = 0;                  // simulated seconds until the last request finished
  double busy = 0;                      // simulated seconds spent in steps
  std::int64_t steps = 0;
  std::int64_t documents_encoded = 0, tokens_encoded = 0, tokens_copied = 0;
  std::int64_t pages_total = 0, page_bytes = 0, peak_pages = 0;
  double mean_pages = 0;  // time-weighted over the busy steps
  KvStoreStats store;
};

class Engine {
 public:
  Engine(Backend& backend, const Workload& workload, const EngineConfig& config)
      : backend_(backend), store_(backend.store()), w_(workload), c_(config) {
    LAZYATTN_CHECK(c_.max_batch >= 1, "rag::Engine: max_batch ", c_.max_batch, ", expected >= 1");
    LAZYATTN_CHECK(c_.max_step_tokens >= 1, "rag::Engine: max_step_tokens ", c_.max_step_tokens,
                   ", expected >= 1");
    for (const auto& d : w_.documents) doc_keys_.push_back(DocKey::from_tokens(d));
    P_ = store_.config().page_size;
  }

  // Runs every request of the workload; `progress(done, total)` after each one finishes.
  RunResult run(const std::function<void(int, int)>& progress = {}) {
    using Clock = std::chrono::steady_clock;
    const auto& reqs = w_.requests;
    result_ = RunResult{};
    result_.requests.resize(reqs.size());
    result_.pages_total = store_.config().num_pages;
    result_.page_bytes = store_.page_bytes();
    std::size_t next = 0;
    std::deque<int> waiting;
    double now = 0, pages_time = 0;
    int done = 0;
    while (done < static_cast<int>(reqs.size())) {
      while (next < reqs.size() && reqs[next].arrival <= now)
        waiting.push_back(static_cast<int>(next++));
      if (active_.empty() && waiting.empty()) {
        now = reqs[next].arrival;
        continue;
      }
      const auto t0 = Clock::now();
      while (!waiting.empty() && static_cast<int>(active_.size()) < c_.max_batch &&
             admit(waiting.front(), now)) {
        waiting.pop_front();
      }
      LAZYATTN_CHECK(!active_.empty(), "rag::Engine: request ", waiting.front(),
                     " does not fit an empty engine's KV budget of ", store_.config().num_pages,
                     " pages");
      std::vector<int> finished = step();
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      now += dt;
      const std::int64_t pages = store_.stats().pages_in_use;
      result_.peak_pages = std::max(result_.peak_pages, pages);
      pages_time += dt * static_cast<double>(pages);
      result_.busy += dt;
      ++result_.steps;
      for (int i : first_tokens_) result_.requests[static_cast<std::size_t>(i)].first_token = now;
      for (int i : finished) {
        result_.requests[static_cast<std::size_t>(i)].finished = now;
        ++done;
        if (progress) progress(done, static_cast<int>(reqs.size()));
      }
    }
    result_.duration = now;
    result_.mean_pages = result_.busy > 0 ? pages_time / result_.busy : 0;
    result_.store = store_.stats();
    return std::move(result_);
  }

 private:
  enum class Phase { kDocs, kPrefill, kDecode };

  struct Pending {  // a document to encode: pinned, allocated, committed after its step
    DocHandle doc;
    std::span<const std::int32_t> tokens;
    std::int64_t rotate_by = 0;
  };

  struct Active {
    int id = 0;
    Phase phase = Phase::kDocs;
    std::vector<DocHandle> slot_docs;  // per document slot: its cache entry (not prefix/full)
    std::vector<DocHandle> pins;       // cache entries this request pinned, one unpin each
    std::vector<DocHandle> privates;   // block-attention's copies
    std::vector<Segment> segments;     // document segments of the layout
    std::int64_t tail_start = 0;
    std::vector<std::int32_t> input;  // tokens of its next extend
    TailHandle tail;
    std::int64_t own_pages = 0;      // promised besides the pinned cache entries
    std::int64_t cached_blocks = 0;  // prefix: blocks reused
    std::vector<DocKey> block_keys;  // prefix: chain keys of the prompt's full blocks
  };

  // ---- cache bookkeeping ------------------------------------------------------------------------

  std::int64_t pages(std::int64_t tokens) const { return store_.pages_for(tokens); }
  std::int64_t doc_len() const { return w_.config.doc_length; }

  static DocKey mix(const DocKey& k, std::uint64_t a, std::uint64_t b) {
    SplitMix64 g(k.hi ^ (a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full) ^ k.lo);
    return DocKey{g.next(), g.next() ^ k.lo};
  }

  std::vector<std::int32_t> prompt_of(const RagRequest& r) const {
    std::vector<std::int32_t> p;
    for (int d : r.docs) {
      const auto& t = w_.documents[static_cast<std::size_t>(d)];
      p.insert(p.end(), t.begin(), t.end());
    }
    p.insert(p.end(), r.question.begin(), r.question.end());
    return p;
  }

  // Prefix mode: key of block b chains the key of block b - 1 with the block's tokens.
  std::vector<DocKey> chain_keys(std::span<const std::int32_t> prompt) const {
    std::vector<DocKey> keys;
    DocKey parent{0x5eed, 0x5eed};
    for (std::size_t b = 0; (b + 1) * static_cast<std::size_t>(P_) <= prompt.size(); ++b) {
      const DocKey own = DocKey::from_tokens(prompt.subspan(b * P_, static_cast<std::size_t>(P_)));
      parent = mix(own, parent.hi, parent.lo);
      keys.push_back(parent);
    }
    return keys;
  }

  void pin_entry(Active& a, DocHandle h, std::int64_t n_pages) {
    auto [it, fresh] = engine_pins_.try_emplace(h.slot, PinCount{h, 0, n_pages});
    if (fresh) promised_ += n_pages;
    ++it->second.count;
    a.pins.push_back(h);
  }
  void unpin_entry(Active& a, DocHandle h) {
    store_.unpin(h);
    auto it = engine_pins_.find(h.slot);
    if (--it->second.count == 0) {
      promised_ -= it->second.pages;
      engine_pins_.erase(it);
    }
    a.pins.erase(std::find(a.pins.begin(), a.pins.end(), h));
  }

  void count_use(const DocKey& k) {
    ++frequency_[k];
    last_use_[k] = ++use_clock_;
  }

  // LFU: erase the least requested unpinned entries until `needed` pages are free. LRU leaves it
  // to the store.
  void make_room(std::int64_t needed) {
    if (c_.eviction != Eviction::kLfu || needed <= 0) return;
    for (;;) {
      const KvStoreStats s = store_.stats();
      if (s.pages_total - s.pages_in_use >= needed) return;
      std::optional<std::pair<DocKey, DocHandle>> victim;
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (!store_.is_live(it->second)) {
          it = entries_.erase(it);
          continue;
        }
        if (store_.info(it->second).pins == 0) {
          auto rank = [&](const DocKey& k) { return std::pair(frequency_[k], last_use_[k]); };
          if (!victim || rank(it->first) < rank(victim->first)) victim = *it;
        }
        ++it;
      }
      if (!victim) return;  // nothing evictable: the store will say so
      store_.erase(victim->second);
      entries_.erase(victim->first);
    }
  }

  DocHandle allocate(const DocKey& key, std::int64_t length, bool cache_entry) {
    make_room(pages(length));
    const InsertResult r = store_.allocate(key, StorageForm::kLocal, length);
    if (cache_entry && r.inserted && c_.eviction == Eviction::kLfu) entries_[key] = r.handle;
    return r.handle;
  }

  // ---- admission ----------------------------------------------------------------------------

  bool admit(int id, double now) {
    const RagRequest& r = w_.requests[static_cast<std::size_t>(id)];
    const auto& wc = w_.config;
    const auto D = static_cast<std::int64_t>(r.docs.size());
    RequestRecord& rec = result_.requests[static_cast<std::size_t>(id)];
    Active a;
    a.id = id;
    const std::vector<std::int32_t> prompt = prompt_of(r);
    const auto prompt_len = static_cast<std::int64_t>(prompt.size());
    const std::int64_t out = wc.output_tokens;

    // What this request would pin: (key, found handle, rotate_by) per slot, and its own pages.
    struct Need {
      DocKey key;
      std::optional<DocHandle> found;
      std::int64_t rotate_by = 0;
    };
    std::vector<Need> needs;
    std::int64_t extra = 0;
    std::vector<DocKey> counted;
    auto consider = [&](const DocKey& key, std::int64_t length, std::int64_t rotate_by) {
      Need n{key, store_.find(key, StorageForm::kLocal), rotate_by};
      const bool pinned_already = n.found && engine_pins_.contains(n.found->slot);
      if (!pinned_already && std::find(counted.begin(), counted.end(), key) == counted.end()) {
        extra += pages(length);
        counted.push_back(key);
      }
      needs.push_back(n);
    };
    switch (c_.mode) {
      case Mode::kFull:
        a.own_pages = pages(prompt_len + out);
        break;
      case Mode::kPrefix: {
        a.block_keys = chain_keys(prompt);
        // At least the last prompt token is computed: its logits give the first output token.
        const std::int64_t max_blocks = (prompt_len - 1) / P_;
        for (std::int64_t b = 0; b < max_blocks; ++b) {
          const DocKey& k = a.block_keys[static_cast<std::size_t>(b)];
          std::optional<DocHandle> h = store_.find(k, StorageForm::kLocal);
          if (!h) break;
          needs.push_back(Need{k, h, 0});
          if (!engine_pins_.contains(h->slot)) extra += 1;
        }
        a.cached_blocks = static_cast<std::int64_t>(needs.size());
        const std::int64_t computed = prompt_len - a.cached_blocks * P_;
        const auto publish = static_cast<std::int64_t>(a.block_keys.size()) - a.cached_blocks;
        a.own_pages = pages(computed + out) + publish;
        break;
      }
      case Mode::kPositionAware:
        for (std::int64_t j = 0; j < D; ++j) {
          const std::int64_t start = j * wc.doc_length;
          consider(mix(doc_keys_[static_cast<std::size_t>(r.docs[j])], 0x705, start), doc_len(),
                   start);
        }
        a.own_pages = pages(wc.question_length + out);
        break;
      case Mode::kBlockAttention:
      case Mode::kLazy:
        for (std::int64_t j = 0; j < D; ++j)
          consider(doc_keys_[static_cast<std::size_t>(r.docs[j])], doc_len(), 0);
        a.own_pages = pages(wc.question_length + out) +
                      (c_.mode == Mode::kBlockAttention ? D * pages(doc_len()) : 0);
        break;
    }
    if (promised_ + extra + a.own_pages > store_.config().num_pages) return false;

    // Admitted: pin what is cached, allocate what is missing (encoded in a later step).
    promised_ += a.own_pages;
    rec.id = id;
    rec.arrival = r.arrival;
    rec.admitted = now;
    rec.prompt_tokens = prompt_len;
    rec.doc_lookups = static_cast<int>(D);
    for (const Need& n : needs) count_use(n.key);
    if (c_.mode == Mode::kPrefix) {
      for (const Need& n : needs) {
        store_.pin(*n.found);
        pin_entry(a, *n.found, 1);
      }
      rec.reused_tokens = a.cached_blocks * P_;
      for (std::int64_t j = 0; j < D; ++j) rec.doc_hits += (j + 1) * doc_len() <= rec.reused_tokens;
      // Blocks hold keys at their absolute positions (start 0): one KV run once coalesced.
      for (std::int64_t b = 0; b < a.cached_blocks; ++b)
        a.segments.push_back(Segment::document(a.pins[static_cast<std::size_t>(b)], P_, 0));
      a.tail_start = rec.reused_tokens;
      a.input.assign(prompt.begin() + rec.reused_tokens, prompt.end());
    } else if (c_.mode == Mode::kFull) {
      a.tail_start = 0;
      a.input = prompt;
    } else {
      for (std::size_t j = 0; j < needs.size(); ++j) {
        const Need& n = needs[j];
        std::optional<DocHandle> h = n.found;
        if (h && !store_.is_live(*h)) h.reset();  // evicted by this request's own allocations
        if (!h) h = store_.find(n.key, StorageForm::kLocal);  // allocated for an earlier slot
        // A hit is a document the cache held when the request came; a repeat of one this
        // request brought in itself is not.
        if (n.found) ++rec.doc_hits;
        if (h) {
          store_.pin(*h);
        } else {
          h = allocate(n.key, doc_len(), /*cache_entry=*/true);
          pending_.push_back(
              Pending{*h, w_.documents[static_cast<std::size_t>(r.docs[j])], n.rotate_by});
        }
        pin_entry(a, *h, pages(doc_len()));
        a.slot_docs.push_back(*h);
      }
      a.tail_start = D * wc.doc_length;
      a.input = r.question;
    }
    rec.computed_tokens = static_cast<std::int64_t>(a.input.size());
    a.tail = store_.create_tail(StorageForm::kLocal);
    a.phase = Phase::kDocs;
    active_.push_back(std::move(a));
    return true;
  }

  // ---- one step -----------------------------------------------------------------------------

  bool docs_ready(const Active& a) const {
    for (DocHandle h : a.slot_docs) {
      if (!store_.info(h).committed) return false;
    }
    return true;
  }

  std::int64_t reserve(Active& a, std::int64_t n) {
    const std::int64_t len = store_.info(a.tail).length;
    make_room(pages(len + n) - pages(len));
    return store_.reserve(a.tail, n);
  }

  // Block-attention: private copies of the request's documents, re-rotated to their positions;
  // the cached originals are unpinned at once (the copies are what the request reads).
  void make_private_copies(Active& a) {
    const auto& wc = w_.config;
    for (std::size_t j = 0; j < a.slot_docs.size(); ++j) {
      const DocHandle src = a.slot_docs[j];
      const DocHandle copy = allocate(DocKey{0xb10cca77e0000000ull, private_counter_++}, doc_len(),
                                      /*cache_entry=*/false);
      const std::int64_t start = static_cast<std::int64_t>(j) * wc.doc_length;
      backend_.copy_rotated(store_.info(src).pages, 0, store_.info(copy).pages, doc_len(), start);
      store_.commit(copy);
      a.privates.push_back(copy);
      result_.tokens_copied += doc_len();
    }
    for (DocHandle h : a.slot_docs) unpin_entry(a, h);
  }

  // Prefix mode: the prompt's full blocks computed here become cache entries (copied out of the
  // tail, K re-rotated from tail positions to absolute ones: an exact prefix always sits at the
  // same positions, as in vLLM's cache) and are unpinned at once.
  void publish_blocks(Active& a) {
    const std::vector<std::int32_t> tail_pages = store_.info(a.tail).pages;
    for (auto b = static_cast<std::size_t>(a.cached_blocks); b < a.block_keys.size(); ++b) {
      const DocKey& key = a.block_keys[b];
      make_room(1);
      const InsertResult r = store_.allocate(key, StorageForm::kLocal, P_);
      if (r.inserted) {
        const std::int64_t offset = static_cast<std::int64_t>(b) * P_ - a.tail_start;
        backend_.copy_rotated(tail_pages, offset, store_.info(r.handle).pages, P_, a.tail_start);
        store_.commit(r.handle);
        if (c_.eviction == Eviction::kLfu) entries_[key] = r.handle;
        result_.tokens_copied += P_;
      }
      store_.unpin(r.handle);
    }
  }

  // LFU: whether `key` ranks among the lfu_capacity most requested keys so far.
  bool in_lfu_set(const DocKey& key) {
    const auto rank = std::pair(frequency_[key], last_use_[key]);
    std::int64_t above = 0;
    for (const auto& [k, f] : frequency_) above += std::pair(f, last_use_[k]) > rank;
    return above < c_.lfu_capacity;
  }

  void finish(Active& a) {
    store_.release(a.tail);
    std::vector<DocHandle> held = a.pins;
    while (!a.pins.empty()) unpin_entry(a, a.pins.back());
    if (c_.eviction == Eviction::kLfu && c_.mode != Mode::kPrefix) {
      for (DocHandle h : held) {
        if (!store_.is_live(h)) continue;
        const DocInfo info = store_.info(h);
        if (info.pins == 0 && !in_lfu_set(info.key)) {
          store_.erase(h);
          entries_.erase(info.key);
        }
      }
    }
    for (DocHandle h : a.privates) {
      store_.unpin(h);
      store_.erase(h);
    }
    promised_ -= a.own_pages;
  }

  // Runs one step; returns the ids of the requests that finished in it.
  std::vector<int> step() {
    first_tokens_.clear();
    StepBatch batch;
    std::vector<Active*> extended;
    std::vector<RequestLayout> layouts;
    std::vector<std::vector<std::int32_t>> inputs;
    std::int64_t budget = c_.max_step_tokens;
    auto fits = [&](std::int64_t n) {
      return batch.encodes.empty() && extended.empty() ? true : n <= budget;
    };
    auto extend = [&](Active& a, std::vector<std::int32_t> tokens) {
      const auto n = static_cast<std::int64_t>(tokens.size());
      const std::int64_t first = reserve(a, n);
      inputs.push_back(std::move(tokens));
      extended.push_back(&a);
      budget -= n;
      RequestLayout layout;
      layout.segments = a.segments;
      layout.segments.push_back(Segment::of_tail(a.tail, first + n, a.tail_start));
      layout.num_queries = n;
      layouts.push_back(std::move(layout));
      batch.extends.push_back(ExtendItem{a.tail, first, {}});
    };
    // Decodes first: one token each.
    for (Active& a : active_) {
      if (a.phase == Phase::kDecode) extend(a, {a.input.back()});
    }
    // Then documents to encode, oldest first.
    std::size_t encoded = 0;
    while (encoded < pending_.size() &&
           fits(static_cast<std::int64_t>(pending_[encoded].tokens.size()))) {
      const Pending& p = pending_[encoded++];
      batch.encodes.push_back(EncodeItem{p.doc, p.tokens, p.rotate_by});
      budget -= static_cast<std::int64_t>(p.tokens.size());
      ++result_.documents_encoded;
      result_.tokens_encoded += static_cast<std::int64_t>(p.tokens.size());
    }
    // Then prefills whose documents are in the store.
    for (Active& a : active_) {
      if (a.phase != Phase::kDocs || !docs_ready(a)) continue;
      if (!fits(static_cast<std::int64_t>(a.input.size()))) break;  // first come, first served
      if (c_.mode == Mode::kBlockAttention) {
        make_private_copies(a);
        for (std::size_t j = 0; j < a.privates.size(); ++j) {
          // Keys already at their positions: start 0 makes the query turn by m, eager attention.
          a.segments.push_back(Segment::document(a.privates[j], doc_len(), 0));
        }
      } else if (c_.mode == Mode::kPositionAware) {
        for (DocHandle h : a.slot_docs) a.segments.push_back(Segment::document(h, doc_len(), 0));
      } else if (c_.mode == Mode::kLazy) {
        for (std::size_t j = 0; j < a.slot_docs.size(); ++j) {
          a.segments.push_back(Segment::document(
              a.slot_docs[j], doc_len(), static_cast<std::int64_t>(j) * w_.config.doc_length));
        }
      }
      a.phase = Phase::kPrefill;
      extend(a, std::move(a.input));
    }

    Plan plan;
    if (!batch.extends.empty()) {
      plan = make_plan(store_, layouts);
      coalesce_document_segments(plan);
      batch.plan = &plan;
      for (std::size_t b = 0; b < inputs.size(); ++b) batch.extends[b].tokens = inputs[b];
    }
    StepOutput out;
    backend_.forward(batch, out, c_.record_logits);

    for (std::size_t i = 0; i < encoded; ++i) {
      store_.commit(pending_.front().doc);
      pending_.pop_front();
    }
    const int vocab = backend_.model().vocab_size;
    std::vector<int> finished;
    for (std::size_t b = 0; b < extended.size(); ++b) {
      Active& a = *extended[b];
      RequestRecord& rec = result_.requests[static_cast<std::size_t>(a.id)];
      const std::int32_t token = out.next_tokens[b];
      rec.tokens.push_back(token);
      if (c_.record_logits) {
        rec.logits.insert(rec.logits.end(),
                          out.logits.begin() + static_cast<std::ptrdiff_t>(b) * vocab,
                          out.logits.begin() + static_cast<std::ptrdiff_t>(b + 1) * vocab);
      }
      if (a.phase == Phase::kPrefill) {
        first_tokens_.push_back(a.id);
        if (c_.mode == Mode::kPrefix) publish_blocks(a);
        a.phase = Phase::kDecode;
      }
      a.input = {token};
      if (static_cast<int>(rec.tokens.size()) == w_.config.output_tokens) {
        finish(a);
        finished.push_back(a.id);
      }
    }
    std::erase_if(active_, [&](const Active& a) {
      return std::find(finished.begin(), finished.end(), a.id) != finished.end();
    });
    return finished;
  }

  struct PinCount {
    DocHandle handle;
    int count = 0;
    std::int64_t pages = 0;
  };

  Backend& backend_;
  KvBookkeeping& store_;
  const Workload& w_;
  EngineConfig c_;
  int P_ = 16;
  std::vector<DocKey> doc_keys_;
  std::vector<Active> active_;  // admission order
  std::deque<Pending> pending_;
  std::unordered_map<std::uint32_t, PinCount> engine_pins_;  // by slot: pinned by running requests
  std::int64_t promised_ = 0;  // pages running requests may hold at once
  std::unordered_map<DocKey, DocHandle, DocKeyHash> entries_;  // cache entries (for LFU)
  std::unordered_map<DocKey, std::int64_t, DocKeyHash> frequency_, last_use_;
  std::int64_t use_clock_ = 0;
  std::uint64_t private_counter_ = 0;
  std::vector<int> first_tokens_;
  RunResult result_;
};

}  // namespace lazyattn::rag
