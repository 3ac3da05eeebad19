#!/bin/bash
# Session 2026-11-30b call b: diagnostics of the RAG tail's RoPE cost: HEAD against d1 (no query rebuild at segment changes: wrong results, timing only) and d2 (the RoPE-off build walks runs of segments too); Nsight Compute source counters of HEAD's wgmma kernel on the RAG tail, local and RoPE off.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/b.tar.xz
R=/tmp/rb; mkdir -p $R
for round in 1 2; do for v in head d1 d2; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## round $round: shape head d1 d2 (us)"
paste <(awk '{print $1, $2}' $R/pf_head_$round.txt) <(awk '{print $2}' $R/pf_d1_$round.txt) <(awk '{print $2}' $R/pf_d2_$round.txt)
done | tee $R/ab.txt
for m in local rope_off; do
  timeout 90 ncu --clock-control none -k regex:prefill_wgmma --launch-skip 3 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section InstructionStats --section SchedulerStats \
    -o $R/rag_$m build/pb-head/lazyattn_bench_prefill --benchmark_filter="rag_tail/$m/" > $R/ncu_rag_$m.log 2>&1
  ncu -i $R/rag_$m.ncu-rep --print-details all > $R/ncu_rag_$m.txt 2>&1
  ncu -i $R/rag_$m.ncu-rep --page source --csv --print-source sass > $R/ncu_rag_${m}_src.csv 2>&1
  grep -E "Executed Instructions  |Issue Slots|Warp Cycles Per Issued|Eligible Warps|Duration" $R/ncu_rag_$m.txt | head
done
rm -f $R/*.ncu-rep
tar czf $OUT/rb.tgz -C $R .
