#!/usr/bin/env bash
# Installs the Debian packages that the server and browser tests use (Squid, Redis, Chromium; iproute2 for the
# namespaced proxy cluster), when missing; with --bench also those only the benchmarks use (wrk, the HTTP load
# generator of benchmarks/proxy.py --targets).
# Needs root and apt-get; elsewhere it says what to install and exits 0 (those tests then skip, naming the package).
# Usage: scripts/system-deps.sh                    (install what is missing)
#        scripts/system-deps.sh --bench            (and what the benchmarks need)
#        scripts/system-deps.sh [--bench] --check  (only list what is missing)
set -uo pipefail
bench=0 check=0
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    --check) check=1 ;;
    *) echo "system-deps: unknown option $arg (expected --bench, --check)" >&2; exit 2 ;;
  esac
done
# command -> Debian package
declare -A PACKAGES=(
  [squid]=squid
  [redis-server]=redis-server
  [chromium]=chromium
  [chromedriver]=chromium-driver
  [ip]=iproute2
)
if [ "$bench" = 1 ]; then
  PACKAGES[wrk]=wrk
fi
missing=()
for cmd in "${!PACKAGES[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("${PACKAGES[$cmd]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$check" = 1 ]; then
  echo "missing Debian packages: ${missing[*]}"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: not root or no apt-get; tests that need ${missing[*]} will skip (install: apt-get install ${missing[*]})" >&2
  exit 0
fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || echo "system-deps: apt-get failed; the tests that need ${missing[*]} will skip" >&2
exit 0
