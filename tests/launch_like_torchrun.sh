#!/usr/bin/env bash
# Starts N copies of a command as torchrun starts its workers: RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set
# on one host. As torchrun does when a worker fails, the others are stopped
# (SIGTERM), here GRACE_S seconds after the first failure, so that the
# test sees what they do meanwhile. Exits with the first non-zero exit
# code, or 0.
#
#   launch_like_torchrun.sh N PORT GRACE_S command args...
set -u
n=$1 port=$2 grace=$3
shift 3
workers=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  workers+=($!)
done
code=0 timer="" reaped=0
while ((reaped < n)); do
  wait -n -p who
  c=$?
  if [[ $who == "$timer" ]]; then  # the grace period is over
    kill "${workers[@]}" 2>/dev/null
    continue
  fi
  reaped=$((reaped + 1))
  if ((c != 0 && code == 0)); then
    code=$c
    sleep "$grace" </dev/null >/dev/null 2>&1 &
    timer=$!
  fi
done
[[ -n $timer ]] && kill "$timer" 2>/dev/null
exit "$code"
