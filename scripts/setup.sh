#!/usr/bin/env bash
# Install what the build needs (Debian packages, idempotent) and build Trestle into build/.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libyaml-dev libxxhash-dev libopenmpi-dev openmpi-bin
          libopenblas-dev libpcre2-dev clang clang-format python3 python3-matplotlib python3-pip)
# tests/cli/slurm.sh starts its own slurmctld and slurmd; opt in, as the packages install services.
[ "${TRESTLE_TEST_SLURM:-0}" = 1 ] && packages+=(slurmd slurmctld slurm-client)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The TensorBoard test (tests/cli/tensorboard.sh) reads the event files back with the
# tensorboard package; it is skipped, saying so, where the package cannot be installed.
if ! python3 -c 'import tensorboard' 2>/dev/null; then
  echo "setup: installing the tensorboard Python package (tests/cli/tensorboard.sh)"
  python3 -m pip install -q tensorboard==2.21.0 ||
    python3 -m pip install -q --break-system-packages tensorboard==2.21.0 ||
    echo "setup: tensorboard not installed; cli_tensorboard will be skipped"
fi

[ "${1:-}" = "--no-build" ] && exit 0
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
