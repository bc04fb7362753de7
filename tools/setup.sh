#!/usr/bin/env bash
# Installs the Debian packages shardtrain needs to build and test, if any is missing.
# Idempotent and quiet when everything is present; needs root (or sudo) only to install.
set -euo pipefail

packages=(bazel-bootstrap bazel-rules-java libopenmpi-dev openmpi-bin libopenblas-dev
          libcjson-dev fortunes python3 python3-matplotlib)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
