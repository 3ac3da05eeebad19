#!/bin/bash
# Call g (2026-11-30 evening): the one-process comparison of call f again in full mode (30
# samples x 10 calls per sample), the same library (build/pb-capi, decode code as 9894eb1).
# carry [".deps", "build/pb-capi", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 LAZYATTN_LIB=$PWD/build/pb-capi/capi LAZYATTN_COMMIT=1314229
mkdir -p $OUT/capi
timeout 200 python3 bench/peers/lazyattn_vs_sdpa.py $OUT/capi/lazyattn_vs_sdpa.json > $OUT/capi/lazyattn_vs_sdpa.log 2>&1
python3 - $OUT/capi/lazyattn_vs_sdpa.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("copy %.3f TB/s" % d["copy"]["tbps"])
for r in d["rows"]:
    print(r["layout"], r["batch"], r["context"], "local %.3f" % r.get("local_tbps", 0),
          "cudnn %.3f" % r.get("cudnn_tbps", 0), "flash %.3f" % r.get("flash_tbps", 0),
          "l/cudnn %.3f" % r.get("local_vs_cudnn", 0), "ovh local %+.2f%% raw %+.1f%%" %
          (100 * r.get("rope_overhead_local", 0), 100 * r.get("rope_overhead_raw", 0)))
PY
