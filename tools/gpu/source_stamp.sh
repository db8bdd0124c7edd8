#!/usr/bin/env bash
# One hash of every source and build file of moetier (run from anywhere): the stamp that
# ties a carried binary (tools/gpu/carry_bin.sh) to the sources it was built from.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
find apps backend bench core cpu cuda experts gguf model quant runtime server synth tokenizer CMakeLists.txt \
  -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name 'CMakeLists.txt' -o -name '*.cmake' \) |
  LC_ALL=C sort | xargs md5sum | md5sum | cut -d' ' -f1
