#!/bin/sh
# serve.sh BUILD - `make serve`: `tessera serve` on the embedded default
# model: the real stories260K when ../shared/models holds it, otherwise a
# generated stories260K-shaped model (random weights: the text is noise).
# Open mode (no tenants file) on 127.0.0.1:${PORT:-8080}; extra options in
# SERVE_ARGS (e.g. SERVE_ARGS="--tenants tenants.json --pool fmodel,fmodel").
# Stop it with Ctrl-C: the requests in flight finish first.
set -eu
BUILD=${1:-build}
T="$BUILD/bin/tessera"
M=${TSR_MODELS_DIR:-../shared/models}
if [ -n "${MODEL:-}" ]; then
  set -- -m "$MODEL${TOKENIZER:+,$TOKENIZER}"
elif [ -f "$M/stories260K.bin" ] && [ -f "$M/tok512.bin" ]; then
  set -- -m "stories260K=$M/stories260K.bin,$M/tok512.bin"
else
  gen="$BUILD/demo/stories260K-random.gguf"
  if [ ! -f "$gen" ]; then
    mkdir -p "$BUILD/demo"
    "$T" gen-model -o "$gen" --preset stories260K --seed 1
  fi
  echo "serve: no reference model in $M; serving a generated model with random weights ($gen)"
  set -- -m "stories260K=$gen"
fi
echo "serve: try  curl -s http://127.0.0.1:${PORT:-8080}/v1/completions -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"temperature\":0}'"
# shellcheck disable=SC2086
exec "$T" serve "$@" --port "${PORT:-8080}" ${SERVE_ARGS:-}
