#!/bin/bash
# One device call, run from the repo root on the lent H200(s) with .whl and .paro_real carried:
#   bash bench/device_run.sh tp tests pq2 paro      (any subset, in that order)
# tp: bench/bench_tp.py (needs nvidia-h200-x2); tests: every gpu test of radiance.kernels;
# learned: bench/bench_learned.py (z-lab's ParoQuant optimizer vs radiance's on a real Qwen layer, then the whole 0.5B; .carry/learned and its wheels carried);
# producers: bench/bench_producers.py (the fused producers per layer; PRODUCERS_ARGS, e.g. --sites); sweep: bench/sweep_paro_decode.py (decode tiles); pdl: bench/probes/pdl_probe.py (programmatic dependent launch at decode, on vs off); floor: bench/floor.py (what an M = 1 linear cannot beat); pattern: bench/probes/read_pattern.py (the decode GEMM's read pattern against a contiguous one); prologue: bench/probes/sweep_prologue.py; ncu: Nsight Compute on bench/probes/$NCU_TARGET's kernels matching $NCU_K (sections, then stall reasons as CSV); breakdown: bench/probes/prefill_breakdown.py; gemmdata: bench/gemm_data.py (cuBLAS time against operand dtype and values); pq2 / paro: the two kernel benchmarks (extra args through PQ2_ARGS / PARO_ARGS; TESTS narrows the tests, TEST_K selects by -k).
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$PWD; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
mkdir -p /tmp/rp/radiance && for f in $R/radiance/*; do ln -sf $f /tmp/rp/radiance/; done
ln -sfn $R/kernels /tmp/rp/radiance/kernels; ln -sfn $R/quantize /tmp/rp/radiance/quantize
export PYTHONPATH=/tmp/rp:$R  # $R last: spawned test workers import their test module from it
export BENCH_COMMIT=$(cat .carry/COMMIT 2>/dev/null || echo unknown)  # the commit the tree was sent from (results rows carry it)
nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
ls $R/.whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-deps $R/.whl/*.whl 2>&1 | tail -1
for step in "$@"; do
  t0=$(date +%s); echo "=== $step"
  case $step in
    tp) python3 bench/bench_tp.py --out $OUT/tp.jsonl 2>&1 | tail -30 ;;
    tests) timeout ${TEST_S:-240} python3 -P -m pytest ${TESTS:-kernels/tests} -q -p no:cacheprovider -m gpu ${TEST_K:+-k "$TEST_K"} 2>&1 \
             | tee $OUT/pytest.log | tail -25 ;;
    pq2) python3 bench/bench_pq2.py --out $OUT $PQ2_ARGS 2>&1 | tee $OUT/pq2.log | tail -40 ;;
    paro) python3 bench/bench_paro.py --out $OUT $PARO_ARGS 2>&1 | tee $OUT/paro.log | tail -40 ;;
    producers) python3 bench/bench_producers.py --out $OUT $PRODUCERS_ARGS 2>&1 | tee $OUT/producers.log | tail -20 ;;
    learned) python3 bench/bench_learned.py device --out $OUT $LEARNED_ARGS 2>&1 | tee $OUT/learned.log | tail -60 ;;
    sweep) python3 bench/sweep_paro_decode.py --out $OUT $SWEEP_ARGS 2>&1 | tee $OUT/sweep.log | tail -60 ;;
    gemmdata) python3 bench/gemm_data.py $GEMMDATA_ARGS 2>&1 | tee $OUT/gemmdata.log | tail -40 ;;
    breakdown) python3 bench/probes/prefill_breakdown.py $BREAKDOWN_ARGS 2>&1 | tee $OUT/breakdown.log | tail -20 ;;
    floor) python3 bench/floor.py --out $OUT $FLOOR_ARGS 2>&1 | tee $OUT/floor.log | tail -20 ;;
    pdl) python3 bench/probes/pdl_probe.py --out $OUT $PDL_ARGS 2>&1 | tee $OUT/pdl.log | tail -40 ;;
    pattern) python3 bench/probes/read_pattern.py --out $OUT $PATTERN_ARGS 2>&1 | tee $OUT/pattern.log | tail -60 ;;
    prologue) python3 bench/probes/sweep_prologue.py --out $OUT $PROLOGUE_ARGS 2>&1 | tee $OUT/prologue.log | tail -40 ;;
    ncu) ncu --clock-control none -k regex:"$NCU_K" -c ${NCU_C:-10} --section SpeedOfLight --section Occupancy \
           --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
           --section ComputeWorkloadAnalysis \
           python3 bench/probes/$NCU_TARGET 2>&1 | tee $OUT/ncu.log | grep -v "^    [-]*$" | tail -${NCU_TAIL:-400}
         stalls=$(for r in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle not_selected \
                    selected no_instruction barrier dispatch_stall drain membar branch_resolving tex_throttle imc_miss; do
                    echo smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio; done | paste -sd,)
         ncu --clock-control none -k regex:"$NCU_K" -c ${NCU_C:-10} --csv --metrics $stalls \
           python3 bench/probes/$NCU_TARGET > $OUT/ncu_stalls.csv 2>&1; tail -5 $OUT/ncu_stalls.csv ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "=== $step took $(( $(date +%s) - t0 )) s"
done
