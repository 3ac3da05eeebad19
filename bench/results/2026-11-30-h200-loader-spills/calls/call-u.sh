#!/bin/bash
# Device call u (2026-11-30, afternoon session): the SASS of the warp-specialised prefill kernels
# with line info (which values the RoPE builds' loader spills: ptxas 14/20 against 0/0 with RoPE
# off), then the full check of db6e0e4 (the review's refactors: PTX-identical, not yet run).
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-head
#   scripts/pack-prebuilt build/pbu.tar.xz build/pb-head
# carry [".deps", "build/pbu.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbu.tar.xz scripts/pack-prebuilt --unpack-env
W=/tmp/u; mkdir -p $W/elf
( cd $W/elf && cuobjdump -xelf all "$OLDPWD/build/pb-head/lazyattn_bench_prefill" >/dev/null 2>&1 )
ls $W/elf | head
for c in $W/elf/*sm_90a*.cubin; do nvdisasm -gi -c "$c" >> $W/all.sass 2>&1; done
echo "nvdisasm: $(wc -l < $W/all.sass) lines"
# The warp-specialised bf16 kernels (RoPE off, general RoPE, one-segment).
for k in Lb0ELb1ELb0E Lb1ELb1ELb0E Lb1ELb1ELb1E; do
  awk -v k="prefill_wgmma_kernelI13__nv_bfloat16${k}Ev" '
    /^[ \t]*\.section[ \t]+\.text\./ { on = index($0, k) > 0 } on { print }' $W/all.sass > $W/ws_$k.sass
  echo "$k: $(wc -l < $W/ws_$k.sass) lines, $(grep -c 'STL' $W/ws_$k.sass) STL, $(grep -c 'LDL' $W/ws_$k.sass) LDL"
done
tar -czf $OUT/sass.tar.gz -C $W ws_Lb0ELb1ELb0E.sass ws_Lb1ELb1ELb0E.sass ws_Lb1ELb1ELb1E.sass
COMMIT=${COMMIT:-db6e0e4}
TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 BENCH_TIMEOUT=120 LAZYATTN_PREBUILT=build/pb-head \
  LAZYATTN_COMMIT=$COMMIT OUT=$OUT/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 |
  grep -E "passed|failed|FAIL|SUMMARY|rag_tail|encode_|^\| 1 x|^\| 64 x 10272" | head -40
