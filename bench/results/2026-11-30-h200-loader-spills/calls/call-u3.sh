#!/bin/bash
# Device calls u2 and u3 (2026-11-30, right after call u): call u's SASS step again, its awk having
# matched no function (the kernels' mangled names end in EEEv). u2 also listed the names; u3 is
# this file. Binaries as call u's (build/pbu.tar.xz).
# carry [".deps", "build/pbu.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbu.tar.xz scripts/pack-prebuilt --unpack-env
W=/tmp/u2; mkdir -p $W/elf
( cd $W/elf && cuobjdump -xelf all "$OLDPWD/build/pb-head/lazyattn_bench_prefill" >/dev/null 2>&1 )
for c in $W/elf/*sm_90a*.cubin; do nvdisasm -gi -c "$c" >> $W/all.sass 2>&1; done
for k in Lb0ELb1ELb0E Lb1ELb1ELb0E Lb1ELb1ELb1E; do
  awk -v k="prefill_wgmma_kernelI13__nv_bfloat16${k}EEv" '
    /^\/\/-+ \.text\./ { on = index($0, k) > 0 } on { print }' $W/all.sass > $W/ws_$k.sass
  echo "$k: $(wc -l < $W/ws_$k.sass) lines, $(grep -c 'STL' $W/ws_$k.sass) STL, $(grep -c 'LDL' $W/ws_$k.sass) LDL"
done
tar -czf $OUT/sass.tar.gz -C $W ws_Lb0ELb1ELb0E.sass ws_Lb1ELb1ELb0E.sass ws_Lb1ELb1ELb1E.sass
