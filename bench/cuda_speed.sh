#!/usr/bin/env bash
# The issue #14 speed rows on CUDA (bench/cuda_speed.py), for a session lent a GPU through
# the device tool. Not run yet: no session of this project has had a GPU.
#
# The device machine reaches nothing outside it and a call carries at most 64 MiB, while
# the CUDA wheels (onnxruntime-gpu, onnxruntime-genai-cuda) and the model built for CUDA
# are larger; so everything is packed here into parts of at most 60 MiB, each part is
# carried by one call onto the (warm) machine, and the last call joins them and measures.
#
#   here:    bash bench/cuda_speed.sh pack        # builds the CUDA model, fetches wheels, splits
#   device:  run(command="bash bench/cuda_speed.sh stage", carry=[".device-carry/part-00"]) … one call a part
#   device:  run(command="bash bench/cuda_speed.sh measure", carry=[".device-carry/part-NN"])  # the last part
#
# Results come back in $OUT (cuda_speed.json and the log); copy them to bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.device-carry
STAGE=/tmp/dragoman-cuda
PY=${PYTHON:-python3}

case "${1:-}" in
pack)
  rm -rf "$CARRY" && mkdir -p "$CARRY/pack/wheels"
  # The model, built here for CUDA (the builder has no platform dependency).
  .venv/bin/python -c "from backends.onnx.prepare import prepare_smollm2; print(prepare_smollm2('cuda', progress=True))" \
    | tail -1 >"$CARRY/model-path"
  cp -r "$(cat "$CARRY/model-path")" "$CARRY/pack/model"
  # Wheels for the device's Python 3.12 (its image has numpy; the rest is ours).
  for wheel in onnxruntime-gpu onnxruntime-genai-cuda==0.18.0 msgspec tokenizers; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$CARRY/pack/wheels" "$wheel"
  done
  tar -C "$CARRY/pack" -cf - . | split -b 60M -d - "$CARRY/part-"
  for part in "$CARRY"/part-*; do mkdir "$part.d" && mv "$part" "$part.d/" && mv "$part.d" "$part"; done
  rm -rf "$CARRY/pack"
  ls -la "$CARRY"
  echo "carry each $CARRY/part-NN in its own call (stage), the last one with measure"
  ;;
stage | measure)
  mkdir -p "$STAGE"
  cp "$CARRY"/part-*/part-* "$STAGE/" 2>/dev/null || true
  ls -la "$STAGE"
  if [ "$1" = stage ]; then exit 0; fi
  OUT=${OUT:-$PWD/cuda-out}
  mkdir -p "$OUT" "$STAGE/pack"
  cat "$STAGE"/part-* | tar -C "$STAGE/pack" -xf -
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STAGE/site" "$STAGE"/pack/wheels/*.whl
  export PYTHONPATH="$STAGE/site:$PWD" PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  set -o pipefail
  $PY bench/cuda_speed.py --model-dir "$STAGE/pack/model" --out "$OUT/cuda_speed.json" 2>&1 | tee "$OUT/cuda_speed.log"
  ;;
*)
  sed -n '2,16p' "$0"
  exit 2
  ;;
esac
