// The Eigen reference allocates its buffers once per call, never per page, key block or segment:
// the number of heap allocations of a call must not grow with the context or the query count.
// Counted by wrapping malloc, so not under the sanitizers (they own malloc).
#include "support/catch.hpp"

#include "ref/scenario.hpp"

#if !LAZYATTN_TEST_SANITIZED && LAZYATTN_REF_HAS_EIGEN && defined(__GLIBC__)

#include <atomic>
#include <cstddef>

extern "C" void* __libc_malloc(std::size_t);
extern "C" void* __libc_calloc(std::size_t, std::size_t);
extern "C" void* __libc_realloc(void*, std::size_t);

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// glibc lets the executable replace malloc; operator new and Eigen's aligned_malloc come here.
extern "C" void* malloc(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
extern "C" void* calloc(std::size_t count, std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(count, n);
}
extern "C" void* realloc(void* p, std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;

namespace {

long allocations_of_attend(const ScenarioSpec& spec, Method method) {
  Scenario sc = make_scenario(spec);
  std::vector<float> out(sc.out_size()), lse(sc.lse_size());
  long before = g_allocations.load();
  lazyattn::ref::eigen::attend(*sc.store, sc.plan, spec.layer, sc.rope, spec.params(), sc.q, out,
                               lse, method);
  return g_allocations.load() - before;
}

}  // namespace

TEST_CASE("eigen::attend allocates per call, not per page or per query", "[ref][eigen][alloc]") {
  for (Method method : {Method::kDeferred, Method::kEager}) {
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      for (int head_dim : {64, 256}) {
        ScenarioSpec small;
        small.doc_form = small.tail_form = form;
        small.head_dim = head_dim;
        small.num_qo_heads = 16;
        small.num_kv_heads = 2;
        small.prefixes = false;
        small.num_requests = 2;
        small.doc_lengths = {20, 30};
        small.docs_per_request = 2;
        small.num_queries = {1, 2};
        ScenarioSpec large = small;
        large.doc_lengths = {200, 300};
        large.num_queries = {33, 70};
        INFO(lazyattn::ref::to_string(method)
             << " " << to_string(form) << " head_dim " << head_dim);
        long a = allocations_of_attend(small, method);
        long b = allocations_of_attend(large, method);
        CHECK(a > 0);  // the counter is live
        CHECK(a == b);
      }
    }
  }
}

TEST_CASE("eigen::encode_document allocates per call, not per key block", "[ref][eigen][alloc]") {
  Rng rng(11);
  RopeConfig c;
  c.head_dim = 128;
  RopePolicy rope(c);
  AttentionParams p;
  p.num_qo_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  auto count = [&](std::int64_t length) {
    auto n = static_cast<std::size_t>(length);
    std::vector<float> q = random_normal(n * 8 * 128, rng), k = random_normal(n * 2 * 128, rng);
    std::vector<float> v = random_normal(n * 2 * 128, rng), out(q.size()), lse(n * 8), ks(k.size());
    long before = g_allocations.load();
    lazyattn::ref::eigen::encode_document(rope, p, length, q, k, v, out, lse, ks);
    return g_allocations.load() - before;
  };
  CHECK(count(10) == count(600));
}

#endif
