// Catch2 runner for lazyattn's tests, with the suite's own options:
//   --store-ops N   operations in the randomized store model test (default 100000)
//   --cuda-cases N  scenarios in the CUDA sweeps (default 48)
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"

#include "support/options.hpp"

int main(int argc, char* argv[]) {
  Catch::Session session;
#if LAZYATTN_CATCH_V3
  using namespace Catch::Clara;
#else
  using namespace Catch::clara;
#endif
  auto cli = session.cli() | Opt(lazyattn::test::options().store_ops, "count")["--store-ops"](
                                 "operations in the randomized store model test") |
             Opt(lazyattn::test::options().cuda_cases, "count")["--cuda-cases"](
                 "scenarios in the CUDA sweeps");
  session.cli(cli);
  if (int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  return session.run();
}
