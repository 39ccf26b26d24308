#!/usr/bin/env bash
# Idempotent set-up: Debian packages, the torch wheel (LibTorch inside it) in a virtual environment kept in
# a per-version cache outside the checkout, then a Release build. Fast when everything is already there.
#   PINFEED_CACHE      cache root (default ~/.cache/pinfeed): venvs and generated datasets
#   PINFEED_BUILD_DIR  build folder (default <repo>/build)
#   CMAKE_PREFIX_PATH  set it to use another LibTorch (2.x) instead of the wheel
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
TORCH_VERSION=2.11.0
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
build=${PINFEED_BUILD_DIR:-$repo/build}
py=$(command -v python3)
pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
venv=$cache/venv-torch-$TORCH_VERSION-py$pyver

step() { echo "[setup] $*" >&2; }

# 1. Debian packages (only what is missing; apt-get needs root or sudo).
pkgs=(cmake ninja-build g++ ccache pkg-config libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev
      libjpeg-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev libgloo-dev
      python3-venv)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
  step "installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# 2. LibTorch, from the torch wheel, unless the caller points CMake at another one.
if [ -z "${CMAKE_PREFIX_PATH:-}" ]; then
  if [ ! -f "$venv/.complete" ]; then
    step "installing torch==$TORCH_VERSION into $venv (once; later checkouts and CI reuse it)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "torch==$TORCH_VERSION" numpy
    touch "$venv/.complete"
  fi
  # The charts of `scripts/tables.py parity` and `tta` (a venv made before they were needed lacks it).
  if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    step "installing matplotlib into $venv"
    "$venv/bin/pip" install -q matplotlib
  fi
  # The peers the augmentation tests hold pinfeed's ops against (tests/check_augment.py): test references only,
  # LARS, LAMB and the EMA against timm's; pinfeed's code never imports them. torchvision's version is the one built for this torch.
  if ! "$venv/bin/python" -c 'import torchvision, timm' 2>/dev/null; then
    step "installing torchvision and timm into $venv (test references)"
    "$venv/bin/pip" install -q "torchvision==0.26.0" "timm==1.0.31" "torch==$TORCH_VERSION"
  fi
  # pytest: the Python module's tests (tests/python); scikit-build-core: `pip install --no-build-isolation .` of
  # the module into this venv (pyproject.toml's build backend).
  if ! "$venv/bin/python" -c 'import pytest, scikit_build_core' 2>/dev/null; then
    step "installing pytest and scikit-build-core into $venv"
    "$venv/bin/pip" install -q pytest "scikit-build-core>=0.10"
  fi
  # tensorboard: the test of pinfeed.tensorboard reads its event files back (tests/check_tensorboard.py).
  if ! "$venv/bin/python" -c 'import tensorboard' 2>/dev/null; then
    step "installing tensorboard into $venv (a test reference)"
    "$venv/bin/pip" install -q "tensorboard==2.21.0"
  fi
  # nvJPEG (data.decoder = "nvjpeg"): the CUDA toolkit's where it has one, else the nvidia-nvjpeg wheel's beside
  # torch (CPU machines' toolkits lack it; CMake finds it there). Its 13.0 series matches the CUDA 13.0 toolkit.
  if [ ! -f /usr/local/cuda/include/nvjpeg.h ] && ! compgen -G "$venv/lib/python*/site-packages/nvidia/cu13/include/nvjpeg.h" >/dev/null; then
    step "installing nvidia-nvjpeg into $venv"
    "$venv/bin/pip" install -q "nvidia-nvjpeg==13.0.*"
  fi
  # The cuDNN frontend's header-only C++ API (include/ beside torch; model.bn_graph). The wheel also holds a
  # Python module pinfeed does not use.
  if ! compgen -G "$venv/lib/python*/site-packages/include/cudnn_frontend.h" >/dev/null; then
    step "installing nvidia-cudnn-frontend into $venv"
    "$venv/bin/pip" install -q "nvidia-cudnn-frontend==1.23.0"
  fi
  CMAKE_PREFIX_PATH=$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
fi
export CMAKE_PREFIX_PATH

# 3. Configure (nvcc must be on PATH for a CUDA LibTorch, even on a machine without a GPU) and build.
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export CCACHE_BASEDIR=$repo            # cache hits across checkouts in other folders
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
if [ ! -f "$build/build.ninja" ]; then
  step "configuring $build"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev >/dev/null
fi
step "building"
cmake --build "$build" -j"$(nproc)"
echo "$venv" > "$build/.venv_path"
