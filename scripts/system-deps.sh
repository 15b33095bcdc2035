#!/usr/bin/env bash
# Installs the Debian packages that the server and browser tests use (Squid, Redis, Chromium) and that `make wheel`
# uses (patchelf, for auditwheel), when missing.
# Needs root and apt-get; elsewhere it says what to install and exits 0 (those tests then skip, naming the package).
# Usage: scripts/system-deps.sh            (install what is missing)
#        scripts/system-deps.sh --check    (only list what is missing)
set -uo pipefail
# command -> Debian package
declare -A PACKAGES=(
  [squid]=squid
  [redis-server]=redis-server
  [chromium]=chromium
  [chromedriver]=chromium-driver
  [patchelf]=patchelf
)
missing=()
for cmd in "${!PACKAGES[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("${PACKAGES[$cmd]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
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
