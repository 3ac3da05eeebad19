// Tests for the decode split schedule (cuda/lazyattn/cuda/schedule.hpp, a host-safe header): tiles
// never cross segments, splits cover every tile exactly once, partial slots are dense, and the
// heuristic fills the GPU at batch 1 without splitting large batches.
#include "support/catch.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/lazyattn.hpp"

using namespace lazyattn;

namespace {

// A plan with the given segment lengths per request (plan arrays only; no store needed). Segment
// j of a request starts at 1000 j, documents alternate raw and local form, and the last segment is
// the tail, raw, local or absolute by its index, so that the tile records' copies of the segments
// can be told apart.
Plan plan_of(const std::vector<std::vector<std::int32_t>>& lengths) {
  Plan p;
  p.page_size = 16;
  for (const auto& req : lengths) {
    for (std::size_t j = 0; j < req.size(); ++j) {
      const std::int32_t l = req[j];
      const bool tail = j + 1 == req.size();
      p.segment_length.push_back(l);
      p.segment_start.push_back(1000 * static_cast<std::int64_t>(j));
      p.segment_form.push_back(static_cast<std::uint8_t>(tail ? j % 3 : j % 2));
      p.segment_kind.push_back(
          static_cast<std::uint8_t>(tail ? SegmentKind::kTail : SegmentKind::kDocument));
      for (std::int32_t i = 0; i < (l + 15) / 16; ++i) p.page_ids.push_back(0);
      p.segment_page_indptr.push_back(static_cast<std::int32_t>(p.page_ids.size()));
    }
    p.request_segment_indptr.push_back(static_cast<std::int32_t>(p.segment_length.size()));
    p.request_query_indptr.push_back(p.request_query_indptr.back() + 1);
  }
  return p;
}

void check_cover(const Plan& plan, const cuda::DecodeSchedule& s) {
  // Every tile lies in one segment, starts inside it on a tile boundary and holds the keys up to
  // the next boundary or the segment's end; a segment's tiles follow each other and cover it.
  REQUIRE(s.tiles.size() == static_cast<std::size_t>(s.num_tiles));
  std::vector<std::int64_t> keys_covered(static_cast<std::size_t>(plan.num_segments()), 0);
  for (std::int32_t t = 0; t < s.num_tiles; ++t) {
    const cuda::TileInfo& ti = s.tiles[static_cast<std::size_t>(t)];
    INFO("tile " << t << " segment " << ti.segment << " key0 " << ti.key0 << " rows " << ti.rows);
    REQUIRE(ti.segment >= 0);
    REQUIRE(ti.segment < plan.num_segments());
    const auto seg = static_cast<std::size_t>(ti.segment);
    const std::int32_t len = plan.segment_length[seg];
    REQUIRE(ti.key0 < len);
    REQUIRE(ti.key0 % s.tile_keys == 0);
    REQUIRE(ti.key0 == keys_covered[seg]);
    REQUIRE(ti.rows == std::min(s.tile_keys, len - ti.key0));
    keys_covered[seg] += ti.rows;
    CHECK(ti.page_base == plan.segment_page_indptr[seg]);
    // The kernels know raw and local form: an absolute tail is local form rotated from 0.
    const auto form = static_cast<StorageForm>(plan.segment_form[seg]);
    CHECK(ti.form == static_cast<std::int32_t>(form == StorageForm::kRaw ? StorageForm::kRaw
                                                                         : StorageForm::kLocal));
    CHECK(ti.seg_start == (form == StorageForm::kAbsolute ? 0 : plan.segment_start[seg]));
    CHECK(ti.is_tail == (plan.segment_kind[seg] == static_cast<std::uint8_t>(SegmentKind::kTail)));
  }
  for (std::size_t seg = 0; seg < keys_covered.size(); ++seg)
    CHECK(keys_covered[seg] == plan.segment_length[seg]);
  // Work items tile each request's tiles in order, without gap or overlap.
  std::vector<int> covered(static_cast<std::size_t>(s.num_tiles), 0);
  std::int32_t partials = 0;
  for (std::int32_t w = 0; w < s.num_work(); ++w) {
    std::int32_t b = s.work_request[w];
    REQUIRE(s.work_tile_begin[w] <= s.work_tile_end[w]);
    for (std::int32_t t = s.work_tile_begin[w]; t < s.work_tile_end[w]; ++t) {
      ++covered[t];
      std::int32_t seg = s.tiles[static_cast<std::size_t>(t)].segment;
      REQUIRE(seg >= plan.request_segment_indptr[b]);
      REQUIRE(seg < plan.request_segment_indptr[b + 1]);
    }
    REQUIRE(s.work_split[w] < s.request_num_splits[b]);
  }
  for (int c : covered) REQUIRE(c == 1);
  for (std::int32_t b = 0; b < plan.num_requests(); ++b) {
    if (s.request_num_splits[b] > 1) {
      REQUIRE(s.request_partial_offset[b] == partials);
      partials += s.request_num_splits[b];
    } else {
      REQUIRE(s.request_partial_offset[b] == -1);
    }
  }
  REQUIRE(partials == s.num_partials);
}

}  // namespace

TEST_CASE("decode schedule covers every tile once, per segment", "[schedule]") {
  Plan plan = plan_of({{1, 64, 65, 0, 130}, {17}, {2048, 2048, 32}});
  for (int forced : {0, 1, 2, 3, 7, 1000}) {
    cuda::ScheduleOptions opt;
    opt.forced_splits = forced;
    cuda::DecodeSchedule s = cuda::make_decode_schedule(plan, 8, opt);
    INFO("forced " << forced);
    // Segment tiles: 1, 1, 2, 0, 3 | 1 | 32, 32, 1
    REQUIRE(s.num_tiles == 7 + 1 + 65);
    check_cover(plan, s);
    if (forced > 0) {
      CHECK(s.request_num_splits[0] == std::min(forced, 7));
      CHECK(s.request_num_splits[1] == 1);
      CHECK(s.request_num_splits[2] == std::min(forced, 65));
    }
  }
}

TEST_CASE("decode split heuristic fills the GPU at batch 1 and leaves big batches whole",
          "[schedule]") {
  cuda::ScheduleOptions opt;  // 132 SMs, 2 CTAs each
  {
    Plan one = plan_of({{32736, 32}});
    cuda::DecodeSchedule s = cuda::make_decode_schedule(one, 8, opt);
    check_cover(one, s);
    std::int64_t ctas = std::int64_t{s.num_work()} * 8;
    CHECK(ctas >= 132 * 2);  // at least one full wave of CTAs
    CHECK(s.request_num_splits[0] > 1);
  }
  {
    std::vector<std::vector<std::int32_t>> big(128, std::vector<std::int32_t>{8160, 32});
    Plan plan = plan_of(big);
    cuda::DecodeSchedule s = cuda::make_decode_schedule(plan, 8, opt);
    check_cover(plan, s);
    CHECK(s.num_partials == 0);  // 1024 CTAs already: no split, no merge
  }
}

TEST_CASE("decode split heuristic gives every SM work from batch 1 to batch 256", "[schedule]") {
  // The bar: the split heuristic fills all 132 SMs at every batch size. With 8 KV heads
  // and one request of L keys per batch entry, every multiprocessor gets at least one CTA
  // whenever the plan has that much work (splits of at least min_tiles_per_split tiles), no
  // split is shorter than that, and the last CTA of a request is never more than one tile
  // shorter than its first (an even split).
  cuda::ScheduleOptions opt;  // 132 SMs, 2 CTAs each, splits of >= 2 tiles
  std::vector<int> batches;
  for (int b = 1; b <= 40; ++b) batches.push_back(b);
  for (int b : {48, 64, 96, 128, 160, 192, 224, 256}) batches.push_back(b);
  for (std::int32_t L : {100, 1024, 4096, 10272, 32768}) {
    for (int B : batches) {
      INFO("batch " << B << " x " << L << " keys");
      Plan plan = plan_of(std::vector<std::vector<std::int32_t>>(static_cast<std::size_t>(B), {L}));
      cuda::DecodeSchedule s = cuda::make_decode_schedule(plan, 8, opt);
      const std::int64_t tiles = (L + opt.tile_keys - 1) / opt.tile_keys;
      const std::int64_t most = std::int64_t{B} * 8 *
                                std::max<std::int64_t>(1, tiles / opt.min_tiles_per_split);
      const std::int64_t ctas = std::int64_t{s.num_work()} * 8;
      CHECK(ctas >= std::min<std::int64_t>(opt.num_sms, most));
      for (std::int32_t w = 0; w < s.num_work(); ++w) {
        const std::int32_t n = s.work_tile_end[w] - s.work_tile_begin[w];
        CHECK(n >= std::min<std::int64_t>(opt.min_tiles_per_split, tiles));
        const std::int32_t first = w - s.work_split[w];  // the request's first work item
        CHECK(s.work_tile_end[first] - s.work_tile_begin[first] - n <= 1);
      }
    }
  }
  // Batch 1 over a long context takes (nearly) a full wave: 32 splits x 8 heads of 264 slots.
  Plan one = plan_of({{32768}});
  CHECK(cuda::make_decode_schedule(one, 8, opt).num_work() * 8 >= 132 * 2 - 8);
}

TEST_CASE("decode schedule rejects bad options naming them", "[schedule]") {
  Plan plan = plan_of({{10}});
  cuda::ScheduleOptions opt;
  opt.tile_keys = 40;
  CHECK_THROWS_WITH(cuda::make_decode_schedule(plan, 8, opt), Catch::Contains("tile_keys 40"));
  opt.tile_keys = 64;
  CHECK_THROWS_WITH(cuda::make_decode_schedule(plan, 0, opt), Catch::Contains("num_kv_heads 0"));
  opt.forced_splits = -1;
  CHECK_THROWS_WITH(cuda::make_decode_schedule(plan, 8, opt), Catch::Contains("forced_splits -1"));
}
