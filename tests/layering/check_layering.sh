#!/usr/bin/env bash
# The include layering the CMake targets stand on, checked on the sources (no compiler, no
# CUDA): the kernel folders include only what their targets link, so a header reaching up
# fails here even where its target is not built (a CPU-only CI machine skips cuda/).
#   cpu/, cuda/kernels/  ->  core/, quant/ and their own folder only
#   backend/             ->  core/, quant/ and itself (the interface knows no implementation)
#   experts/             ->  no model/, cuda/, backend/, runtime/, server/, apps/, and no
#                            CUDA header (<cuda*.h>, <cublas*.h>, *.cuh)
# Usage: check_layering.sh [SOURCE_ROOT] (default: the repository this script is in).
# Prints every offending include as file:line and exits 1 if there is one.
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$ROOT" || { echo "check_layering: no folder $ROOT"; exit 2; }
bad=0
sources() {  # the C++ / CUDA sources under a folder (none: nothing to check)
  [ -d "$1" ] || return 0
  find "$1" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \)
}
# allow FOLDER PREFIX...: every quoted include of FOLDER's sources starts with one of PREFIX.
allow() {
  local folder=$1
  shift
  local f
  while IFS= read -r f; do
    while IFS=: read -r line inc; do
      local ok=0 p
      for p in "$@"; do
        case $inc in "$p"*) ok=1 ;; esac
      done
      if [ $ok -eq 0 ]; then
        echo "$f:$line: includes \"$inc\" ($folder may include only: $*)"
        bad=1
      fi
    done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed -E 's/^([0-9]+):[^"]*"([^"]*)".*/\1:\2/')
  done < <(sources "$folder")
}
# deny FOLDER REGEX WHY: no include line of FOLDER's sources matches REGEX.
deny() {
  local folder=$1 re=$2 why=$3
  local hits
  hits=$(sources "$folder" | xargs -r grep -n -E "^[[:space:]]*#[[:space:]]*include[[:space:]]*$re" || true)
  if [ -n "$hits" ]; then
    echo "$hits" | sed "s|\$| ($why)|"
    bad=1
  fi
}
allow cpu "core/" "quant/" "cpu/"
allow cuda/kernels "core/" "quant/" "cuda/kernels/"
allow backend "core/" "quant/" "backend/"
deny experts '"(model|cuda|backend|runtime|server|apps)/' "experts/ stands below model/, cuda/ and the backends"
deny experts '(<(cuda|cublas|cufft|curand|cusparse|nvrtc)[a-z_0-9]*\.h>|"[^"]*\.cuh")' "experts/ is host code with no CUDA header"
if [ $bad -ne 0 ]; then
  echo "check_layering: FAILED"
  exit 1
fi
echo "check_layering: ok (cpu/, cuda/kernels/, backend/, experts/)"
