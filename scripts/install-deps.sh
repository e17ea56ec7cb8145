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
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
