#!/usr/bin/env bash
# Several environment variants of one device script in one call, each in its own fresh
# processes and log folder: A/B runs of MOETIER_CUDA_* switches.
#
#   device: OUT=... SCRIPT=tools/gpu/spec.sh bash tools/gpu/variants.sh \
#             "base:" "argmax_off:MOETIER_CUDA_ARGMAX=0" "dense1:MOETIER_CUDA_DENSE_MMVQ_MAX=1 X=2"
#   Each argument is NAME:ENV... (space-separated VAR=VALUE, none for the baseline); the
#   script's own variables (ACCEPT, EXPERT_CACHES, ...) come from the caller's environment.
set -uo pipefail
OUT=${OUT:-$PWD/out/variants}
SCRIPT=${SCRIPT:-tools/gpu/spec.sh}
for v in "$@"; do
  name=${v%%:*}
  envs=${v#*:}
  echo "##### $name ($envs) $(date +%T)"
  # shellcheck disable=SC2086
  env $envs OUT="$OUT/$name" bash "$SCRIPT" 2>&1 | grep -v '^ok$'
done
