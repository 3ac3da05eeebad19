#!/bin/bash
# Prepared 2026-11-30, NOT RUN (device time spent): the SASS of 84eb54f's warp-specialised
# prefill kernels, to see which values the RoPE builds' loader spills (ptxas: 14/20 spill stores
# / loads against 0/0 with RoPE off; all in the loader, README "After call s"). The build machine
# has no disassembler; the GPU machine's toolkit has cuobjdump.
# Binaries: call s's (build/pbs.tar.xz; rebuild per call-s.sh's header if build/ is gone).
# carry [".deps", "build/pbs.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbs.tar.xz scripts/pack-prebuilt --unpack-env >/dev/null 2>&1
B=build/pb-s/lazyattn_bench_prefill
W=/tmp/t; mkdir -p $W
cuobjdump -sass $B > $W/all.sass 2>&1; echo "cuobjdump rc $?, $(wc -l < $W/all.sass) lines"
# One file per warp-specialised bf16 kernel (RoPE off, general RoPE, one-segment).
for k in Lb0ELb1ELb0E Lb1ELb1ELb0E Lb1ELb1ELb1E; do
  awk -v k="prefill_wgmma_kernelI13__nv_bfloat16$k" '
    /Function :/ { on = index($0, k) > 0 } on { print }' $W/all.sass > $W/ws_$k.sass
  echo "$k: $(wc -l < $W/ws_$k.sass) lines, $(grep -c 'STL' $W/ws_$k.sass) STL, $(grep -c 'LDL' $W/ws_$k.sass) LDL"
done
tar -czf $OUT/sass.tar.gz -C $W ws_Lb0ELb1ELb0E.sass ws_Lb1ELb1ELb0E.sass ws_Lb1ELb1ELb1E.sass
