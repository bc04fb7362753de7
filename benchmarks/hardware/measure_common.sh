# measure_common.sh - the steps benchmarks/hardware/measure_cpu.sh and measure_gpu.sh share
# (sourced; run from the repository root with `set -euo pipefail`):
#   measure_begin OUT DESCRIPTION   the log of the tables measured (OUT.txt beside OUT.hw), its
#                                   date, machine and load average
#   measure_link MPI_P2P            the link: the two-rank MPI ping-pong's latency and bandwidth
#   measure_finish SCRIPT RANKS OP_TIMINGS ARGS...
#                                   the per-kernel efficiencies and the collectives' curves,
#                                   measured against the keys the caller wrote to $keys (a
#                                   hardware file already), then OUT: those keys and the curves
# Each measurement's table is appended to the log; the file is written only when all succeeded.
# shellcheck shell=bash disable=SC2034  # link_bw, link_latency: read by the scripts that source this

# measure_begin OUT DESCRIPTION: sets out, log (OUT.txt) and keys (OUT.keys: the caller writes
# the keys it measured there, as `key = value  # where from` lines) and starts the log.
measure_begin() {
  out=$1
  log="${out%.hw}.txt"
  keys="$out.keys"
  {
    echo "# measured $(date -u +%Y-%m-%dT%H:%MZ) on $2"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$log"
}

# measured KEY < TABLE: the value of a benchmark's `KEY = value` line.
measured() { sed -n "s/^$1 = //p"; }

# measure_link MPI_P2P: the ping-pong of two ranks on this machine; sets link_bw (bytes/s, one
# direction) and link_latency (s).
measure_link() {
  local table
  table=$(mpirun -np 2 --oversubscribe --bind-to none "$1" | tee -a "$log")
  link_bw=$(measured bw <<< "$table")
  link_latency=$(measured latency <<< "$table")
}

# measure_finish SCRIPT RANKS OP_TIMINGS ARGS...: OP_TIMINGS --hardware $keys ARGS... (flags and
# shapes: one efficiency per op class) and mpi_collectives.sh $keys RANKS (one curve per
# collective and rank count; its binary and launcher from the environment it documents), then
# OUT: a header naming SCRIPT and the log, the keys, the efficiencies.
measure_finish() {
  local script=$1 ranks=$2 op_timings=$3 ops coll
  shift 3
  ops=$("$op_timings" --hardware "$keys" "$@" | tee -a "$log")
  # shellcheck disable=SC2086  # RANKS is a list
  coll=$(benchmarks/hardware/mpi_collectives.sh "$keys" $ranks | tee -a "$log")
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"
  {
    echo "# $(measured name < "$keys"): measured by benchmarks/hardware/$script on $(date -u +%Y-%m-%d)"
    echo "# (the tables it measured: $(basename "$log"))"
    cat "$keys"
    grep '^eff_' <<< "$ops"
    grep '^eff_' <<< "$coll"
  } > "$out"
  rm -f "$keys"
  echo "wrote $out (and $log)"
}
