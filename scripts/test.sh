#!/usr/bin/env bash
# Installs the dependencies, builds everything into ./build (RelWithDebInfo,
# ccache when present) and runs every test suite with ctest.
#
#   scripts/test.sh [extra ctest args]   e.g. scripts/test.sh -R Cli -j4
#
# Arguments go to ctest after CTEST_ARGS, unchanged (.ci/run passes its own
# through); with none, ctest runs the whole suite.
#
# Idempotent: a second run re-uses the configured build tree and ccache, so it
# only rebuilds what changed. Environment knobs:
#   BUILD_DIR      build tree (default ./build)
#   BUILD_TYPE     CMake build type (default RelWithDebInfo)
#   JOBS           parallel build/test jobs (default: nproc)
#   CTEST_ARGS     extra ctest arguments, e.g. "-L integration" or "-R Cli"
#   SKIP_DEPS=1    do not run scripts/install-deps.sh
#   SKIP_BUILD=1   do not build (test what BUILD_DIR already holds)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
JOBS="${JOBS:-$(nproc)}"

log() { printf '\n==> %s\n' "$*"; }

if [ "${SKIP_DEPS:-0}" != "1" ]; then
  log "installing dependencies"
  "$ROOT/scripts/install-deps.sh"
fi

# Configure only when the tree is new or was configured differently (another
# build type, or without the tests, e.g. -DMOONCAKE_BUILD_TESTS=OFF); the
# build step re-runs CMake by itself when a CMakeLists.txt changed.
cache="$BUILD_DIR/CMakeCache.txt"
if [ ! -f "$cache" ] || ! grep -q "^CMAKE_BUILD_TYPE:STRING=${BUILD_TYPE}\$" "$cache" ||
   ! grep -q '^MOONCAKE_BUILD_TESTS:BOOL=ON$' "$cache"; then
  log "configuring $BUILD_DIR ($BUILD_TYPE)"
  launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DMOONCAKE_BUILD_TESTS=ON "${launcher[@]}"
fi

if [ "${SKIP_BUILD:-0}" != "1" ]; then
  log "building with -j$JOBS"
  cmake --build "$BUILD_DIR" -j"$JOBS"
fi

# promtool, when install-deps unpacked it (see there).
export PATH="$BUILD_DIR/tools/bin:$PATH"

log "running tests"
# --no-tests=error: a CTEST_ARGS filter that matches nothing (or a tree with
# no tests) fails instead of passing with "No tests were found".
# shellcheck disable=SC2086  # CTEST_ARGS is a list of words on purpose
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j"$JOBS" --timeout 600 ${CTEST_ARGS:-} "$@"
