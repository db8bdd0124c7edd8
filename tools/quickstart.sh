#!/usr/bin/env bash
# The main job on an embedded default: install, build, and generate text with the demo
# model (models/kjv-moe-f16.gguf, a small real MoE trained on the King James Bible),
# streaming the text and then printing timings and the experts each layer used.
#
# usage: tools/quickstart.sh
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bash tools/setup.sh
bash tools/build.sh release
./build/moetier run -p "And God said" -n 64 --seed 42
