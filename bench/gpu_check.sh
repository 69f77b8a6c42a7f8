#!/usr/bin/env bash
# One prepared check for a CUDA machine that has CUDA's compiler, cmake and ninja but no
# network, and room for at most 64 MiB of carried files.
#
#   bash bench/gpu_check.sh prepare   # here, with pip's index: fills .gpu-carry/ (git-ignored)
#   bash bench/gpu_check.sh run       # there, with .gpu-carry carried beside the checkout
#
# `run` builds llama-cpp-python with -DGGML_CUDA=on for compute capability 9.0 (H100/H200)
# from a trimmed copy of its sdist (no models, docs, tests, examples, other backends, no .git:
# ~6 MB instead of 77), writes random-weight GGUF files with the shapes of Qwen2.5-Coder 1.5B
# and 0.5B (F16: speed does not depend on the weights), and prints `lsd devices` and the
# verification cost t(K) for K = 1..33 of both (bench/gpu_shapes.py). Output under $OUT when set.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry
VERSION=0.3.36

prepare() {
    mkdir -p "$CARRY/wheels"
    grep -qx "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >> .git/info/exclude
    local work
    work=$(mktemp -d)
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
    tar xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
    local src="$work/llama_cpp_python-$VERSION" v="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
    rm -rf "$src/.git" "$src/docs" "$src/examples" "$src/tests" "$src/docker" \
        "$v/models" "$v/docs" "$v/tests" "$v/benches" "$v/examples" "$v/conversion" \
        "$v/scripts" "$v/media" "$v/.github" "$v/gguf-py" "$v/grammars" "$v/prompts" "$v/pocs"
    for backend in "$v"/ggml/src/ggml-*/; do
        case "$backend" in
            *ggml-cpu/|*ggml-cuda/|*ggml-rpc/|*ggml-blas/) ;;
            *) [ -f "$backend/CMakeLists.txt" ] && rm -rf "$backend" ;;
        esac
    done
    find "$v/tools" -mindepth 1 -maxdepth 1 ! -name mtmd ! -name CMakeLists.txt -exec rm -rf {} +
    tar czf "$CARRY/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$work" "llama_cpp_python-$VERSION"
    # what the GPU machine's Python lacks (its image has numpy, numba, click, jinja2,
    # huggingface-hub, scikit-build-core, cmake, ninja): gguf and llama-cpp-python's diskcache
    python3 -m pip download --no-deps --only-binary=:all: -d "$CARRY/wheels" gguf diskcache
    rm -rf "$work"
    du -sh "$CARRY"
}

run() {
    local out="${OUT:-/tmp/gpu-check}" site=/tmp/gpu-site build
    mkdir -p "$out" "$site"
    build=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --target "$site" "$CARRY"/wheels/*.whl
    export PYTHONPATH="$site:$PWD"
    tar xzf "$CARRY/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$build"
    echo "== building llama-cpp-python $VERSION with CUDA (sm_90)"
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        python3 -m pip install -q --no-index --no-deps --no-build-isolation --target "$site" \
        "$build/llama_cpp_python-$VERSION" 2>&1 | tail -20 | tee "$out/build.log"
    echo "== lsd devices"
    python3 -m lsd_local devices | tee "$out/devices.txt"
    echo "== verification cost t(K)"
    PYTHONUNBUFFERED=1 python3 bench/gpu_shapes.py --dir /tmp/gpu-models | tee "$out/tk.txt"
}

case "${1:-run}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
