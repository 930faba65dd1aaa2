#!/bin/bash
# One prepared device call (the `device` tool's run): tests/gpu, then the GPU report's MoE and serving steps.
# Everything it measures lands under $OUT (logs, junit XML, report JSON). Each part has its own time limit
# so that a part that hangs still leaves the others their time:
#   TESTS_S (default 380): pytest over tests/gpu, the runtime issue's files first; SIGINT at the limit, so
#                          pytest still prints its summary and writes its XML.
#   REPORT_S (default 0: skipped): benchmarks/gpu_report.py --only "$REPORT_ONLY" within that budget.
# Usage there: bash benchmarks/gpu_session.sh   (python3 is the image's torch; tfcalc from this checkout)
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TFCALC_GPU_OUT=$OUT
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
torch.cuda.get_device_name(0))" 2>&1 | tee "$OUT/env.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1 | tee -a "$OUT/env.log"
FILES=${FILES:-"tests/gpu/test_decode_runtime_cuda.py tests/gpu/test_moe_cuda.py tests/gpu/test_latent_cuda.py
tests/gpu/test_serving_cuda.py tests/gpu/test_cuda.py"}
# shellcheck disable=SC2086
timeout -s INT "${TESTS_S:-380}" python3 -m pytest $FILES -q -s -rA -p no:cacheprovider --timeout 240 \
    --junitxml "$OUT/junit.xml" ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee "$OUT/tests.log" | grep -v "^\s*$"
if [ "${REPORT_S:-0}" -gt 0 ]; then
    timeout -s INT "$((REPORT_S + 30))" python3 benchmarks/gpu_report.py -o "$OUT/gpu_report.json" \
        --budget "$REPORT_S" --only "${REPORT_ONLY:-MoE,infer --measure}" 2>&1 | tee "$OUT/report.log"
fi
