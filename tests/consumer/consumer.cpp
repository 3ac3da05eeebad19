// The consumer tests' program: store one document, place it at two positions, check the plan.
#include <cstdio>
#include <vector>

#include <lazyattn/lazyattn.hpp>

int main() {
  using namespace lazyattn;
  KvStore store({/*num_layers=*/1, /*num_kv_heads=*/2, /*head_dim=*/8, /*page_size=*/4,
                 DType::kBFloat16, /*num_pages=*/16});
  std::vector<float> k(1 * 6 * 2 * 8, 0.5f), v(k);
  DocHandle doc = store.insert<float>(DocKey{1, 2}, StorageForm::kLocal, 6, k, v).handle;
  TailHandle tail = store.create_tail(StorageForm::kLocal);
  store.append<float>(tail, 2, std::vector<float>(32, 0.25f), std::vector<float>(32, 0.25f));
  RequestLayout r;
  r.segments = {Segment::document(doc, 6, 0), Segment::document(doc, 6, 100),
                Segment::of_tail(tail, 2, 106)};
  Plan plan = make_plan(store, r);
  bool ok = plan.num_segments() == 3 && plan.page_ids.size() == 5 && plan.page_ids[0] == plan.page_ids[2] &&
            plan.request_query_position[0] == 107;
  std::printf("lazyattn %d.%d consumer: %s\n", LAZYATTN_VERSION_MAJOR, LAZYATTN_VERSION_MINOR,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
