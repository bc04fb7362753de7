# shellcheck shell=bash disable=SC2154  # mpirun_sh: set by the sourcing test
# each_rank.sh - sourced by the tests that check how each rank of a job ends, not only the job:
# mpirun's exit code is the first non-zero rank's, and .bazelrc has it kill the other ranks at
# once (odls_base_sigkill_timeout=0), so a count of lines over the job and mpirun's code pass a
# rank that exited 0, hung after its line, or said it twice while another said nothing. Needs
# $mpirun_sh (tests/mpirun.sh, or a wrapper that passes its arguments on to it). Defines
#   per_rank   the words to put between the rank count and the command in an mpirun.sh call:
#              mpirun tags each line with the rank that wrote it (--tag-output), and each rank's
#              command runs under `sh -c` which then prints "rank R exit CODE" and exits 0, so
#              that mpirun lets every rank finish instead of ending the job at the first
#              non-zero exit;
#   ranks_said NAME OUTPUT RANKS CODES PATTERN JOB_RC
#              checks OUTPUT, of such a run on RANKS ranks whose mpirun exited JOB_RC: CODES is
#              one exit code for every rank, or one per rank separated by commas, where "-" is a
#              rank the job ended (its command failed alone elsewhere: no exit line, no error
#              line of its own). Each rank that exits says exactly one error line (one that
#              begins "[rank N] error: ", "shardtrain: error: " or "error: "), holding the grep
#              pattern PATTERN (basic regular expression) and, where it names a rank, its own;
#              none at all if PATTERN is empty. JOB_RC is 0 when every rank exits (each wrapper
#              does), otherwise non-zero and not a `timeout`'s 124 or 137. Prints "ok: NAME" or
#              "FAIL: NAME: " with what differed and OUTPUT; returns 1 if anything differed;
#   each_rank NAME RANKS CODES PATTERN COMMAND...
#              runs COMMAND on RANKS ranks under per_rank within $EACH_RANK_TIMEOUT seconds (60
#              if unset) and checks its output with ranks_said.
# shellcheck disable=SC2016  # the wrapper's script expands its own variables, on each rank
per_rank=(--tag-output sh -c '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?"')

ranks_said() {
  local name=$1 out=$2 ranks=$3 codes=$4 pattern=$5 job_rc=$6
  local why=() r code lines errors exits n_err n_hit ended=0
  local -a code_of
  IFS=, read -r -a code_of <<<"$codes"
  [ "${#code_of[@]}" -eq 1 ] || [ "${#code_of[@]}" -eq "$ranks" ] ||
    { echo "FAIL: $name: CODES '$codes' is not one code or $ranks"; return 1; }
  for ((r = 0; r < ranks; r++)); do
    code=${code_of[0]}
    [ "${#code_of[@]}" -eq 1 ] || code=${code_of[$r]}
    # This rank's lines, without mpirun's tag ("[JOB,RANK]<stderr>:").
    lines=$(sed -n "s/^\[[0-9]*,$r\]<std[a-z]*>://p" <<<"$out")
    errors=$(grep -E '^(\[rank [0-9]+\] )?(shardtrain: )?error: ' <<<"$lines")
    if [ "$code" = - ]; then
      ended=1
      grep -q "^rank $r exit " <<<"$lines" && why+=("rank $r exited: the job did not end it")
      [ -z "$errors" ] || why+=("rank $r said an error line")
      continue
    fi
    exits=$(grep "^rank $r exit " <<<"$lines")
    [ "$exits" = "rank $r exit $code" ] ||
      why+=("rank $r: not one 'rank $r exit $code' (got: ${exits:-none})")
    n_err=$(grep -c . <<<"$errors")
    n_hit=$(grep -c -- "$pattern" <<<"$errors")
    if [ -z "$pattern" ]; then
      [ "$n_err" -eq 0 ] || why+=("rank $r said an error line")
    elif [ "$n_err" -ne 1 ] || [ "$n_hit" -ne 1 ]; then
      why+=("rank $r: $n_err error lines, $n_hit holding the pattern (want 1 and 1)")
    elif grep -q '^\[rank ' <<<"$errors" && ! grep -q "^\[rank $r\] " <<<"$errors"; then
      why+=("rank $r: its error line names another rank")
    fi
  done
  if [ "$ended" -eq 0 ] && [ "$job_rc" -ne 0 ]; then
    why+=("mpirun exited $job_rc (want 0: every rank's wrapper exits 0)")
  elif [ "$ended" -eq 1 ] && [[ "$job_rc" =~ ^(0|124|137)$ ]]; then
    why+=("mpirun exited $job_rc (want the job ended by a rank: non-zero, not timed out)")
  fi
  if [ "${#why[@]}" -gt 0 ]; then
    echo "FAIL: $name: $(printf '%s; ' "${why[@]}")pattern '$pattern', output:"
    echo "$out"
    return 1
  fi
  echo "ok: $name: every rank as expected (exit codes $codes)"
}

each_rank() {
  local name=$1 ranks=$2 codes=$3 pattern=$4 out rc
  shift 4
  out=$(timeout "${EACH_RANK_TIMEOUT:-60}" "$mpirun_sh" "$ranks" "${per_rank[@]}" "$@" 2>&1)
  rc=$?
  ranks_said "$name" "$out" "$ranks" "$codes" "$pattern" "$rc"
}
