#!/usr/bin/env bash
# Installs the Debian packages shardtrain needs to build and test, if any is missing, then the
# cuDNN frontend's headers (tools/setup_cudnn_frontend.sh, which never fails the setup).
# Idempotent and quiet when everything is present; needs root (or sudo) only to install.
set -euo pipefail
cd "$(dirname "$0")/.."

# cmake (with make, its build tool) and pkgconf: tests/install builds a program against the
# installed library with both. python3-pip fetches the cuDNN frontend's wheel. shellcheck: the
# test command lints every shell script (tools/test.sh).
packages=(bazel-bootstrap bazel-rules-java libopenmpi-dev openmpi-bin libopenblas-dev
          libcjson-dev fortunes python3 python3-pip python3-matplotlib cmake make pkgconf
          shellcheck)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bash tools/setup_cudnn_frontend.sh
