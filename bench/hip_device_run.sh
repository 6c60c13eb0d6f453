#!/bin/bash
# One device call (run from the repo root on the lent H200, with .device/ carried): import path,
# the libraries nvcc built on the dev machine (else build there), the gpu tests, the numerics table.
# Build the carried libraries first: compile_hip(SRC_DIR, "sm_90", ["-DPQ_WPERM=1"], ".device/pq_wperm1.so") and =0.
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$PWD
mkdir -p /tmp/rp/radiance && for f in $R/radiance/*; do ln -sf $f /tmp/rp/radiance/; done
ln -sfn $R/kernels /tmp/rp/radiance/kernels
export PYTHONPATH=/tmp/rp
nvidia-smi -L; nvcc --version | tail -2; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
L1=$R/.device/pq_wperm1.so; L0=$R/.device/pq_wperm0.so
if python3 -c "import ctypes,sys; [ctypes.CDLL(p).pq_wperm() for p in sys.argv[1:]]" $L1 $L0; then
  echo "using the libraries built by nvcc 13.0 on the dev machine"
else
  echo "prebuilt libraries do not load here; building on the device"
  mkdir -p /tmp/b; L1=/tmp/b/pq1.so; L0=/tmp/b/pq0.so
  python3 -c "
from radiance.kernels.hip.build import compile_hip, SRC_DIR
compile_hip(SRC_DIR,'sm_90',['-DPQ_WPERM=1'],'$L1'); compile_hip(SRC_DIR,'sm_90',['-DPQ_WPERM=0'],'$L0')" || exit 3
fi
export PQ_HIP_TEST_LIB=$L1 PQ_HIP_TEST_LIB_WPERM0=$L0
timeout 150 python3 -P -m pytest kernels/hip/tests/test_device.py -q -p no:cacheprovider -m gpu 2>&1 | tee $OUT/pytest.log | tail -40
timeout 60 python3 bench/hip_numerics.py $L1 2>&1 | tee $OUT/numerics.md
