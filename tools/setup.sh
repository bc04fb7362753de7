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

# apt's locks may be held for minutes by the machine's own updates at boot (apt-daily,
# unattended-upgrades) or by this script in a second shell (the README's two commands started
# at once): wait for them, up to 10 minutes in all, rather than fail. Any other failure (no
# root, a read-only file system) ends the setup at once. The second shell waits on the lock
# file below, then finds nothing missing.
apt_get() {
  until "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 \
        "$@" > "$apt_log" 2>&1; do
    if [ "$SECONDS" -ge "$apt_deadline" ] ||
       ! grep -qE 'Could not get lock|is another process using it' "$apt_log"; then
      cat "$apt_log" >&2
      return 1
    fi
    sleep 5
  done
}
missing_packages() {
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$p")
  done
}
missing_packages
if [ ${#missing[@]} -gt 0 ]; then
  # Open for reading, so a lock file another user made (mode 666 when this script made it) serves.
  lock=${TMPDIR:-/tmp}/shardtrain-setup.lock
  [ -e "$lock" ] || { : > "$lock" && chmod 666 "$lock"; }
  exec 9< "$lock"
  flock 9
  missing_packages # another shell may have installed them meanwhile
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  apt_log=$(mktemp)
  trap 'rm -f "$apt_log"' EXIT
  apt_deadline=$((SECONDS + 600))
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}"
fi

bash tools/setup_cudnn_frontend.sh
