#!/usr/bin/env bash
# Checks scripts/deps.sh --print-nonfree on apt source fixtures: contrib and
# non-free are added on the machine's own mirrors and suites, in deb822 and
# classic sources alike. Run: scripts/deps_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/sources.list.d"

cat >"$dir/sources.list.d/debian.sources" <<'SRC'
# the site mirror
Types: deb deb-src
URIs: http://mirror.example.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBGPL0BUBEADmW5NdOOHwPIJlgPu6JDcKw/NZJPR8lsD9K7Y
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: http://mirror.example.org/debian-off
Suites: trixie
Components: main
Enabled: no

Types: deb
URIs: http://mirror.example.org/debian-done
Suites: trixie
Components: main contrib non-free non-free-firmware
SRC
cat >"$dir/sources.list" <<'SRC'
# classic
deb [arch=amd64 signed-by=/usr/share/keyrings/site.gpg] https://apt.example.com/debian bookworm main # trailing comment
deb-src https://apt.example.com/debian bookworm main
deb http://old.example.com/debian bullseye main contrib non-free
   deb   http://plain.example.com/debian   bookworm-security   main
SRC
# Our own file, from an older deps.sh: not a source to copy.
printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: x\nComponents: main\n' >"$dir/sources.list.d/xpu-timer-nonfree.sources"

got=$(XPU_TIMER_APT_DIR=$dir scripts/deps.sh --print-nonfree)
want='Types: deb
URIs: http://mirror.example.org/debian
Suites: trixie trixie-updates
Components: contrib non-free
Signed-By: 
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBGPL0BUBEADmW5NdOOHwPIJlgPu6JDcKw/NZJPR8lsD9K7Y
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: https://apt.example.com/debian
Suites: bookworm
Components: contrib non-free
Architectures: amd64
Signed-By: /usr/share/keyrings/site.gpg

Types: deb
URIs: http://plain.example.com/debian
Suites: bookworm-security
Components: contrib non-free'
if [ "$got" != "$want" ]; then
	diff <(echo "$want") <(echo "$got") || true
	echo "deps_test: FAIL" >&2
	exit 1
fi

# scripts/sid-python.sh with sid out of reach: one clear error, no prefix.
if out=$(XPU_TIMER_SID_PYTHON=$dir/sid XPU_TIMER_SID_MIRROR=http://127.0.0.1:1/debian scripts/sid-python.sh 2>&1); then
	echo "deps_test: sid-python.sh succeeded with an unreachable mirror" >&2
	exit 1
fi
if ! grep -q "^sid-python: cannot read Debian sid from http://127.0.0.1:1/debian" <<<"$out" || [ -e "$dir/sid" ] || [ -e "$dir/sid.apt" ]; then
	echo "$out" >&2
	echo "deps_test: FAIL: sid-python.sh with an unreachable mirror" >&2
	exit 1
fi
echo "deps_test: ok"
