# shellcheck shell=bash
# Sourced by the cluster scripts (scripts/local-cluster.sh,
# examples/local_cluster.sh, examples/ha_cluster.sh): which recorded process
# is still ours.

# pid_if_ours PIDFILE ARG: prints the PID recorded in PIDFILE if that process
# is alive and one of its arguments is exactly ARG, else nothing. PIDs are
# reused, so "ours" is an argument only the script's own process has (the
# ready file or data directory it was given), never just its name.
pid_if_ours() {
  local pidfile=$1 want=$2 pid arg
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  # No pipeline: under pipefail `tr | grep -q` fails when grep quits early.
  local -a args=()
  mapfile -d '' -t args <"/proc/$pid/cmdline" 2>/dev/null || return 0
  for arg in "${args[@]}"; do
    if [ "$arg" = "$want" ]; then
      echo "$pid"
      return 0
    fi
  done
}
