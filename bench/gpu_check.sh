#!/usr/bin/env bash
# One prepared check for a CUDA machine that has CUDA's compiler, cmake and ninja but no
# network, and room for at most 64 MiB of carried files.
#
#   bash bench/gpu_check.sh prepare   # here, with pip's index: fills .gpu-carry/ (git-ignored)
#   bash bench/gpu_check.sh prebuild  # optional, here, where nvcc is: the CUDA build, ~50 min
#                                     # on 2 cores, instead of building there (device time)
#   bash bench/gpu_check.sh run       # there, with .gpu-carry carried beside the checkout
#
# `run` uses the prebuilt libraries when .gpu-carry holds them, else builds llama-cpp-python
# with -DGGML_CUDA=on for compute capability 9.0 (H100/H200) from a trimmed copy of its sdist
# (no models, docs, tests, examples, other backends, no .git: ~6 MB instead of 77). It writes
# random-weight GGUF files with the shapes of Qwen2.5-Coder 1.5B and 0.5B (F16, and Q4_K_M
# made from them by llama.cpp's quantizer: speed does not depend on the weights), and prints
# `lsd devices`, the verification cost t(K) for K = 1..33 of each (bench/gpu_shapes.py),
# `lsd bench --profile` of the pair, strict answers of each drafter against plain decoding
# on the GPU (bench/gpu_check_runs.py) and the tiny tier's invariants with every layer on the
# GPU. Output under $OUT when set.
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

prebuild() {
    # llama-cpp-python's libraries built with CUDA for sm_90, packed with one copy of each
    # library (the wheel stores every symlink as a file: 267 MB) into ~41 MB of xz. cuBLAS
    # comes from NVIDIA's wheel on PyPI (a CUDA toolkit may ship without it); no driver is
    # needed to build, and without libcuda to link against VMM is off (GGML_CUDA_NO_VMM).
    # The CPU code is built for AVX2, not this machine's own flags (the GPU host's CPU differs).
    local work cublas wheel
    work=$(mktemp -d)
    python3 -m pip download --no-deps --only-binary=:all: -d "$work" "nvidia-cublas>=13,<14"
    (cd "$work" && python3 -m zipfile -e nvidia_cublas-*.whl cublas)
    cublas="$work/cublas/nvidia/cu13"
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
    CUDACXX=${CUDACXX:-$(command -v nvcc)} CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_ARGS="\
-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NO_VMM=ON -DGGML_CUDA_NCCL=OFF \
-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DCUDA_cublas_LIBRARY=$cublas/lib/libcublas.so.13 -DCUDA_cublasLt_LIBRARY=$cublas/lib/libcublasLt.so.13 \
-DCMAKE_CUDA_FLAGS=-I$cublas/include -DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$cublas/lib" \
        python3 -m pip wheel --no-deps "$work/llama_cpp_python-$VERSION.tar.gz" -w "$work/out"
    wheel=$(ls "$work"/out/llama_cpp_python-*.whl)
    (cd "$work" && python3 -m zipfile -e "$wheel" unpacked)
    (cd "$work/unpacked/llama_cpp/lib" && for real in *.so.0.*; do
        stem=${real%%.so.*}; ln -sf "$real" "$stem.so"; ln -sf "$real" "$stem.so.0"; done)
    mkdir -p "$CARRY"
    tar cJf "$CARRY/llama_cpp_cuda.tar.xz" -C "$work/unpacked" llama_cpp
    rm -rf "$work"
    du -sh "$CARRY"
}

run() {
    local out="${OUT:-/tmp/gpu-check}" site=/tmp/gpu-site models=/tmp/gpu-models build
    mkdir -p "$out" "$site" "$models"
    python3 -m pip install -q --no-index --no-deps --target "$site" "$CARRY"/wheels/*.whl
    export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1 LSD_NO_STATE=1
    if [ -f "$CARRY/llama_cpp_cuda.tar.xz" ]; then  # from `prebuild`
        echo "== llama-cpp-python $VERSION with CUDA, prebuilt"
        tar xJf "$CARRY/llama_cpp_cuda.tar.xz" -C "$site"
        # its CUDA libraries by soname, wherever this image keeps them
        local libs
        libs=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' -o -name 'libcudart.so.13*' \
            2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
        export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:-}"
    else
        build=$(mktemp -d)
        tar xzf "$CARRY/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$build"
        echo "== building llama-cpp-python $VERSION with CUDA (sm_90)"
        CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" \
            CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -q --no-index --no-deps \
            --no-build-isolation --target "$site" "$build/llama_cpp_python-$VERSION" 2>&1 \
            | tail -20 | tee "$out/build.log"
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
    echo "== lsd devices"
    timeout 120 python3 -m lsd_local devices 2>&1 | tee "$out/devices.txt"
    echo "== verification cost t(K), F16 and Q4_K_M"
    timeout 300 python3 bench/gpu_shapes.py --dir "$models" --max-k "${MAX_K:-33}" 2>&1 | tee "$out/tk.txt"
    local target="$models/qwen2.5-coder-1.5b-shape-q4_k_m.gguf"
    local draft="$models/qwen2.5-coder-0.5b-shape-q4_k_m.gguf"
    echo "== lsd bench --profile (the pair's shapes as pulled)"
    timeout 180 python3 -m lsd_local bench "$target" --draft "$draft" --profile --prompts chat 2>&1 \
        | tee "$out/profile.txt"
    echo "== strict speculation on the GPU against plain decoding (random weights)"
    local prompt="Copy this list exactly: alpha beta gamma delta epsilon zeta eta theta iota kappa"
    local runs="$models/runs"
    mkdir -p "$runs"
    for drafter in none auto lookup model; do  # (the draft model: 4 every round, p_min 0)
        timeout 120 python3 -m lsd_local run -m "$target" --draft "$draft" --drafter "$drafter" \
            $([ "$drafter" = model ] && echo "-k 4 --p-min 0") --max-tokens 200 --json "$prompt" \
            >"$runs/run-$drafter.json" 2>"$runs/run-$drafter.err" || tail -5 "$runs/run-$drafter.err"
    done
    {
        python3 bench/gpu_check_runs.py "$runs"/run-*.json
        timeout 120 python3 bench/gpu_ties.py "$target" "$prompt" "$runs/run-none.json" \
            "$runs"/run-{auto,lookup,model}.json 2>/dev/null
    } | tee "$out/runs.txt"
    echo "== the tiny tier's invariants on the GPU"
    timeout 420 python3 -m pytest -q -p no:cacheprovider tests/tiny/test_engine_tiny.py \
        tests/tiny/test_sidebyside_tiny.py tests/tiny/test_statecache_tiny.py 2>&1 \
        | grep -E "^(FAILED|ERROR)|passed|failed|At index" | tee "$out/tiny.txt"
}

case "${1:-run}" in
    prepare) prepare ;;
    prebuild) prebuild ;;
    run) run ;;
    *) echo "usage: $0 prepare|prebuild|run" >&2; exit 2 ;;
esac
