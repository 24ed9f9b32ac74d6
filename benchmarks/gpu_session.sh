#!/usr/bin/env bash
# One lease of a lent GPU machine (see docs/benchmarks.md "GPU"): training throughput, MFU and
# a kernel profile of the base preset on JAX, a PyTorch step profiled, decoding on the GPU.
# Run from the repository root by the device tool, with keras' wheels carried in .whl/:
#   bash benchmarks/gpu_session.sh [survey|projection]   (results in $OUT, or /tmp/gpu_out)
# survey: JAX at three batch sizes (one profiled), dropout 0, a PyTorch step profiled, decoding;
# projection: the pre-softmax product in bf16 (projection_dtype None) against float32 (0.3.0).
# SMALL=1 runs the same steps at toy sizes on a CPU, to check the script before a lease.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT" /tmp/traces
PY=${PY:-python3}
if [ -d .whl ] && [ -z "${SMALL:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
  --format=csv 2>/dev/null
if [ -n "${SMALL:-}" ]; then
  SIZES=(--length 8 --steps 2 --warmup 1 --matmul-size 256); BATCHES=(2 3 4); PROFILE=2
  DECODE=(--models tiny --batch-size 4 --source-length 8 --new-tokens 8 --vocabulary-size 500)
else
  SIZES=(--length 64 --steps 20 --warmup 3); BATCHES=(128 200 384); PROFILE=5
  DECODE=(--models base --batch-size 128 --source-length 32 --new-tokens 64
          --vocabulary-size 37000)
fi
train() {  # backend, batch, extra arguments
  KERAS_BACKEND=$1 $PY benchmarks/gpu_throughput.py --settings mixed_bfloat16 \
    --batch-size "$2" "${SIZES[@]}" --out "$OUT/gpu_throughput.jsonl" --trace-dir /tmp/traces \
    --timeout 150 "${@:3}"
}
decode() {  # backend, extra arguments
  KERAS_BACKEND=$1 timeout 150 $PY benchmarks/decode_throughput.py "${DECODE[@]}" --repeats 3 \
    --output "$OUT/decode_$1${2:+_$2}.md" "${@:3}"
}
start=$SECONDS
step() { echo "== $* ($((SECONDS - start)) s)"; }
if [ "${1:-survey}" = survey ]; then
  step "JAX bf16, ${BATCHES[1]} pairs, profiled"
  train jax "${BATCHES[1]}" --profile $PROFILE --projection-dtype float32
  step "PyTorch bf16 eager, ${BATCHES[0]} pairs, profiled"
  train torch "${BATCHES[0]}" --no-jit --profile $PROFILE --projection-dtype float32
  step "JAX bf16, ${BATCHES[2]} pairs"
  train jax "${BATCHES[2]}" --projection-dtype float32
  step "JAX decoding"
  decode jax float32
  decode jax bfloat16 --dtype-policy bfloat16
  step "JAX bf16, ${BATCHES[0]} pairs (the first figures' batch)"
  train jax "${BATCHES[0]}" --projection-dtype float32
  step "JAX bf16, ${BATCHES[1]} pairs, dropout 0"
  train jax "${BATCHES[1]}" --dropout 0 --projection-dtype float32
  step "PyTorch decoding"
  decode torch float32
else
  for projection in compute float32; do
    dtype=(); [ $projection = float32 ] && dtype=(--projection-dtype float32)
    step "JAX bf16, ${BATCHES[1]} pairs, projection $projection, profiled"
    train jax "${BATCHES[1]}" --profile $PROFILE "${dtype[@]}"
    step "PyTorch bf16 eager, ${BATCHES[0]} pairs, projection $projection"
    train torch "${BATCHES[0]}" --no-jit "${dtype[@]}"
  done
  step "JAX bf16, ${BATCHES[2]} pairs, projection compute"
  train jax "${BATCHES[2]}"
fi
cp /tmp/traces/profile_*.json /tmp/traces/torch_trace.json.gz "$OUT/" 2>/dev/null
for xplane in $(find /tmp/traces -name '*.xplane.pb'); do  # traces/<run>/plugins/profile/*/
  run=$(echo "$xplane" | cut -d/ -f4)
  [ "$(stat -c %s "$xplane")" -lt 15000000 ] && cp "$xplane" "$OUT/$run.xplane.pb"
done
echo "== done in $((SECONDS - start)) s"; ls -la "$OUT"
