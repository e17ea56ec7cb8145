#!/usr/bin/env bash
# Installs the build and test dependencies from Debian 12's packages.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

packages=(
  cmake g++ make pkg-config ccache git
  libcpp-httplib-dev libcli11-dev libthrift-dev thrift-compiler python3-thrift
  libboost-dev libevent-dev libibverbs-dev librdmacm-dev
  libamdhip64-dev librocksdb-dev libtbb-dev libgtest-dev libgmock-dev
  nlohmann-json3-dev libspdlog-dev libfmt-dev libssl-dev zlib1g-dev libbrotli-dev openssl
  # curl: local-cluster.sh status (/readyz), examples/ha_cluster.sh (etcd),
  # the REST admin recipes in README and docs/operations.md.
  curl
  # The Python package (python/) and its tests: built against Debian's own
  # interpreter (/usr/bin/python3), never a registry.
  pybind11-dev python3-dev python3-venv python3-pip python3-setuptools python3-wheel
  python3-pytest python3-numpy
  # Master high availability on etcd and its tests.
  etcd-server etcd-client
  # The status page's browser test (headless).
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
else
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# promtool checks our /metrics pages in the tests. It ships in Debian's
# prometheus package; only that one binary is unpacked into the build tree,
# so no Prometheus server is installed or started. Without it (no network),
# that test skips and says why.
TOOLS_DIR="${BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}/tools"
if [ ! -x "$TOOLS_DIR/bin/promtool" ] && ! command -v promtool >/dev/null 2>&1; then
  tmp="$(mktemp -d)"
  if (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1) &&
     dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/unpacked"; then
    install -D -m 0755 "$tmp/unpacked/usr/bin/promtool" "$TOOLS_DIR/bin/promtool"
    echo "install-deps: promtool unpacked into $TOOLS_DIR/bin"
  else
    echo "install-deps: could not fetch promtool (prometheus package); its test will skip" >&2
  fi
  rm -rf "$tmp"
fi
