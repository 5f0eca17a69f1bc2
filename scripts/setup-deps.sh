#!/bin/sh
# setup-deps.sh - installs the Debian packages tessera needs, when missing.
#
# Idempotent and non-interactive; when everything is present it only asks
# dpkg and exits (well under a second). Called by the Makefile before every
# build. Set TSR_SKIP_DEPS=1 to skip (e.g. on a non-Debian system where the
# dependencies were installed another way).
set -eu

[ "${TSR_SKIP_DEPS:-0}" = 1 ] && exit 0

PKGS="build-essential clang libclang-rt-14-dev libtsan2 pkg-config python3 curl time libopenblas-dev libcunit1-dev \
verilator iverilog yosys \
ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo \
libusb-1.0-0-dev umockdev libumockdev-dev zlib1g-dev \
libxrt-dev \
libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev gnuplot-nox python3-prometheus-client \
openmpi-bin libopenmpi-dev"

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup-deps: not a Debian system; install the equivalents of: $PKGS" >&2
  echo "setup-deps: then build with TSR_SKIP_DEPS=1" >&2
  exit 1
fi

missing=""
for p in $PKGS; do
  st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  case "$st" in
    ii*) ;;
    *) missing="$missing $p" ;;
  esac
done
[ -z "$missing" ] && exit 0

echo "setup-deps: installing:$missing" >&2
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup-deps: need root to install:$missing" >&2; exit 1; fi
else
  SUDO=""
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Packages that this Debian release does not carry are reported, not fatal:
# the backends that need them say they are unavailable at run time.
installable=""
for p in $missing; do
  if apt-cache show "$p" >/dev/null 2>&1; then installable="$installable $p"; else
    echo "setup-deps: package $p is not available here; skipping" >&2; fi
done
[ -n "$installable" ] && $SUDO apt-get install -y -qq $installable >&2
exit 0
