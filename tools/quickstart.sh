#!/usr/bin/env bash
# The main job on an embedded default: install, build, synthesize the demo model (a
# Qwen3-30B-A3B-shaped file with the q4_k_m mix, weights as a sparse hole so it needs no
# disk) and inspect it: metadata, tensors, per-layer expert geometry and bank bytes.
# (When generation exists, this runs a prompt instead.)
#
# usage: tools/quickstart.sh
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bash tools/setup.sh
bash tools/build.sh release
mkdir -p out
./build/moetier synth --preset qwen3-30b-a3b --quant q4_k_m --sparse -o out/demo-qwen3-30b-a3b.gguf
./build/moetier inspect out/demo-qwen3-30b-a3b.gguf
