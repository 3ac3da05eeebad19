#!/usr/bin/env bash
# The CPU `tiny` runs behind docs/reproduction.md's tables: build, then three sweeps (Zipf 2.1 and
# uniform popularity over arrival rates, hit ratio over the cache budget). Documents are 256
# tokens instead of the paper's 2048 so that the full-prefill modes finish on a CPU.
source "$(dirname "$0")/cpu_runs.sh"
common=(--config tiny --doc-length 256 --requests 120)
run zipf --mode all --rates 0.5,1,2,3,4 --cache-docs 20
run uniform --mode all --rates 1,2,4 --cache-docs 20 --uniform
run cache --mode lazy,position-aware --rates 1 --cache-docs 5,10,20,40
