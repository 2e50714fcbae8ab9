#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/apt-packages.txt, enabling
# Debian's contrib and non-free components (NVIDIA's libcudart and libnvml
# live there). Idempotent: does nothing when everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t pkgs < <(grep -v '^\s*#' scripts/apt-packages.txt | awk 'NF {print $1}')
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages ${missing[*]}; run as root or install them by hand" >&2
	exit 1
fi

nonfree=/etc/apt/sources.list.d/xpu-timer-nonfree.sources
if [ ! -f "$nonfree" ]; then
	. /etc/os-release
	cat >"$nonfree" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME} ${VERSION_CODENAME}-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
