#!/usr/bin/env bash
# Prepare the llama.cpp oracle: prebuilt llama.cpp shared libraries from the npm package
# node-llama-cpp (pinned) plus the matching llama.cpp headers, extracted from the git bundle
# that ships inside the package. Nothing is downloaded from anywhere but the npm registry and
# nothing of llama.cpp is built.
#
# usage: tools/oracle/setup.sh [DIR]        (default DIR = <repo>/.oracle, git-ignored)
#
# Result in DIR:
#   node_modules/...      the npm install (node-llama-cpp + @node-llama-cpp/linux-x64)
#   bins -> node_modules/@node-llama-cpp/linux-x64/bins/linux-x64   (libllama*.so, libggml*.so)
#   include/              llama.h, llama-cpp.h and ggml/include/*.h of the same commit
#   LLAMA_COMMIT          the llama.cpp commit the libraries were built from
#   VERSION               the pinned node-llama-cpp version (the stamp for "already done")
#   openai/node_modules/openai   the official OpenAI Node client (pinned), the reference
#                         client of the `moetier serve` end-to-end tests (tests/server)
#
# Idempotent: each step is skipped when its result is already there (a re-run takes ~1 s).
set -euo pipefail

NLC_VERSION=3.21.1
OPENAI_VERSION=4.104.0
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
DIR=${1:-$REPO_ROOT/.oracle}

say() { printf 'oracle-setup: %s\n' "$*"; }
die() { printf 'oracle-setup: error: %s\n' "$*" >&2; exit 1; }

mkdir -p "$DIR" || die "cannot create $DIR"
DIR=$(cd "$DIR" && pwd)
say "target folder $DIR"

PKG_DIR=$DIR/node_modules/node-llama-cpp
BINS_REL=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
BINS=$DIR/$BINS_REL
BUNDLE=$PKG_DIR/llama/gitRelease.bundle

installed_version() {
  # version field of an installed package.json, without needing node
  local pj=$1
  [ -f "$pj" ] || return 0
  sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$pj" | head -n 1
}

# 1. npm install (skipped when both packages are present at the pinned version)
have_nlc=$(installed_version "$PKG_DIR/package.json")
have_bin=$(installed_version "$DIR/node_modules/@node-llama-cpp/linux-x64/package.json")
if [ "$have_nlc" = "$NLC_VERSION" ] && [ "$have_bin" = "$NLC_VERSION" ] && [ -d "$BINS" ]; then
  say "npm packages node-llama-cpp@$NLC_VERSION and @node-llama-cpp/linux-x64@$NLC_VERSION already installed (skip)"
else
  command -v npm >/dev/null 2>&1 ||
    die "npm not found: install Node.js and npm (Debian: apt-get install nodejs npm) and re-run"
  [ -f "$DIR/package.json" ] || printf '{\n  "name": "moetier-oracle",\n  "private": true\n}\n' > "$DIR/package.json"
  say "npm install node-llama-cpp@$NLC_VERSION @node-llama-cpp/linux-x64@$NLC_VERSION into $DIR (no llama.cpp download/build)"
  # NODE_LLAMA_CPP_SKIP_DOWNLOAD=true makes node-llama-cpp's postinstall a no-op; --ignore-scripts
  # additionally guarantees that no install script runs at all (we only need the packages' files).
  (cd "$DIR" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i -E --omit=optional --no-audit --no-fund \
      --ignore-scripts \
      "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64@$NLC_VERSION") ||
    die "npm install failed"
  [ -d "$BINS" ] || die "npm install finished but $BINS is missing"
fi

# 2. bins link
if [ "$(readlink "$DIR/bins" 2>/dev/null || true)" = "$BINS_REL" ]; then
  say "bins link already there (skip)"
else
  rm -f "$DIR/bins"
  ln -s "$BINS_REL" "$DIR/bins"
  say "linked $DIR/bins -> $BINS_REL"
fi
for pat in 'libllama*.so' 'libggml.*so' 'libggml-base*.so' 'libggml-cpu*.so'; do
  compgen -G "$DIR/bins/$pat" >/dev/null || die "no $pat in $BINS"
done

# 3. headers + commit from the git bundle
if [ -f "$DIR/include/llama.h" ] && [ -f "$DIR/include/ggml.h" ] && [ -f "$DIR/include/ggml-backend.h" ] &&
   [ -s "$DIR/LLAMA_COMMIT" ] && [ "$(cat "$DIR/VERSION" 2>/dev/null || true)" = "$NLC_VERSION" ]; then
  say "headers already extracted for llama.cpp commit $(cat "$DIR/LLAMA_COMMIT") (skip)"
else
  [ -f "$BUNDLE" ] || die "git bundle $BUNDLE not found"
  command -v git >/dev/null 2>&1 || die "git not found (needed to read $BUNDLE)"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/oracle-bundle.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  say "cloning $BUNDLE (headers only are kept)"
  git clone -q --no-checkout "$BUNDLE" "$tmp/src" || die "git clone of the bundle failed"
  commit=$(git -C "$tmp/src" rev-parse HEAD)
  git -C "$tmp/src" checkout -q "$commit" -- include ggml/include || die "checkout of headers failed"
  rm -rf "$DIR/include.new"
  mkdir -p "$DIR/include.new"
  cp "$tmp/src"/include/*.h "$tmp/src"/ggml/include/*.h "$DIR/include.new/"
  rm -rf "$DIR/include"
  mv "$DIR/include.new" "$DIR/include"
  echo "$commit" > "$DIR/LLAMA_COMMIT"
  echo "$NLC_VERSION" > "$DIR/VERSION"
  say "extracted $(ls "$DIR/include" | wc -l) headers into $DIR/include; llama.cpp commit $commit"
fi

# 4. the OpenAI client, in its own folder so node-llama-cpp's install is left alone
if [ "$(installed_version "$DIR/openai/node_modules/openai/package.json")" = "$OPENAI_VERSION" ]; then
  say "npm package openai@$OPENAI_VERSION already installed (skip)"
else
  command -v npm >/dev/null 2>&1 ||
    die "npm not found: install Node.js and npm (Debian: apt-get install nodejs npm) and re-run"
  mkdir -p "$DIR/openai"
  [ -f "$DIR/openai/package.json" ] ||
    printf '{\n  "name": "moetier-openai-client",\n  "private": true\n}\n' > "$DIR/openai/package.json"
  say "npm install openai@$OPENAI_VERSION into $DIR/openai"
  (cd "$DIR/openai" && npm i -E --no-audit --no-fund --ignore-scripts "openai@$OPENAI_VERSION") ||
    die "npm install of openai failed"
fi

libs=$(cd "$DIR/bins" && ls libllama.v*.so libllama.so libggml.v*.so libggml.so libggml-base*.so 2>/dev/null | tr '\n' ' ' || true)
say "done: MOETIER_ORACLE_DIR=$DIR"
say "  libraries: $libs(in $DIR/bins)"
say "  llama.cpp commit $(cat "$DIR/LLAMA_COMMIT")"
say "  openai@$OPENAI_VERSION in $DIR/openai (tests/server)"
