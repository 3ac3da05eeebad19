// Prints the plan of a small batch (docs/04-layouts.md shows this output): two documents, two
// requests, one of them placing a document twice, flattened into CSR page tables.
#include <cstdint>
#include <iostream>
#include <lazyattn/lazyattn.hpp>
#include <string_view>
#include <vector>

namespace {

template <class T>
void print(std::string_view name, const std::vector<T>& v) {
  std::cout << "  " << name << std::string(24 - name.size(), ' ') << "[";
  for (std::size_t i = 0; i < v.size(); ++i) std::cout << (i ? " " : "") << +v[i];
  std::cout << "]\n";
}

}  // namespace

int main() {
  using namespace lazyattn;
  // Tiny sizes so that the tables fit on a screen: 4 tokens a page, head_dim 8.
  KvStore store({.num_layers = 1,
                 .num_kv_heads = 1,
                 .head_dim = 8,
                 .page_size = 4,
                 .dtype = DType::kFloat32,
                 .num_pages = 32});
  auto tokens = [](std::int64_t n) { return std::vector<float>(n * 8, 1.0f); };
  DocHandle a = store.insert(DocKey{0, 1}, StorageForm::kLocal, 6, tokens(6), tokens(6)).handle;
  DocHandle b = store.insert(DocKey{0, 2}, StorageForm::kRaw, 9, tokens(9), tokens(9)).handle;
  TailHandle t0 = store.create_tail(StorageForm::kLocal);
  store.append(t0, 3, tokens(3), tokens(3));
  TailHandle t1 = store.create_tail(StorageForm::kLocal);
  store.append(t1, 5, tokens(5), tokens(5));

  // Request 0: A, B, A again, back to back, then its tail; one query (a decode step).
  std::vector<DocHandle> docs0{a, b, a};
  RequestLayout r0 = layouts::back_to_back(store, docs0, t0);
  // Request 1: B at 100 and A at 400 (gapped), tail at 500; its last 2 tail tokens query.
  std::vector<DocHandle> docs1{b, a};
  std::vector<std::int64_t> starts1{100, 400};
  RequestLayout r1 = layouts::gapped(store, docs1, starts1, t1, 500, /*num_queries=*/2);

  std::cout << "document A: pages";
  for (auto p : store.info(a).pages) std::cout << " " << p;
  std::cout << " (local)\ndocument B: pages";
  for (auto p : store.info(b).pages) std::cout << " " << p;
  std::cout << " (raw)\ntail 0: pages";
  for (auto p : store.info(t0).pages) std::cout << " " << p;
  std::cout << ", tail 1: pages";
  for (auto p : store.info(t1).pages) std::cout << " " << p;
  std::cout << "\n\nrequest 0: " << r0 << "\nrequest 1: " << r1 << "\n\n";

  std::vector<RequestLayout> batch{r0, r1};
  Plan plan = make_plan(store, batch);
  std::cout << "plan: " << plan.num_requests() << " requests, " << plan.num_segments()
            << " segments, " << plan.num_queries() << " query rows, page_size " << plan.page_size
            << "\n";
  print("request_segment_indptr", plan.request_segment_indptr);
  print("request_query_indptr", plan.request_query_indptr);
  print("request_tail_segment", plan.request_tail_segment);
  print("request_kv_length", plan.request_kv_length);
  print("request_query_position", plan.request_query_position);
  print("request_rope_length", plan.request_rope_length);
  print("segment_page_indptr", plan.segment_page_indptr);
  print("segment_length", plan.segment_length);
  print("segment_start", plan.segment_start);
  print("segment_form", plan.segment_form);
  print("segment_kind", plan.segment_kind);
  print("page_ids", plan.page_ids);
}
