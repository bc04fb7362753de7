#!/usr/bin/env bash
# build_cli.sh - sourced by the benchmark scripts that run the CLI of this checkout:
#   build_cli NAME
# builds //engine/cli:shardtrain optimised, quietly unless it fails: then Bazel's output and one
# line naming NAME go to stderr, and it returns 1.
build_cli() {
  local log rc=0
  log=$(mktemp)
  bazel build -c opt //engine/cli:shardtrain > "$log" 2>&1 || rc=1
  if [ "$rc" -ne 0 ]; then
    cat "$log" >&2
    echo "$1: bazel build -c opt //engine/cli:shardtrain failed (above)" >&2
  fi
  rm -f "$log"
  return "$rc"
}
