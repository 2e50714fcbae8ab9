#!/usr/bin/env bash
# Fetches Debian sid's CPython 3.14 and 3.15 (interpreter, libpython
# minimal and stdlib, and the libc and libraries they load) into a private
# prefix, for the tests of collector/capture/python: apt-get download through a
# private apt directory (its own sid source list, state and cache), then
# dpkg -x. Nothing of the system's packages changes. The interpreters run
# with the prefix's own loader:
#   $prefix/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path $prefix/usr/lib/x86_64-linux-gnu $prefix/usr/bin/python3.14
# (collector/capture/python's tests do that). Idempotent: a prefix complete for the
# same package list is left as it is.
#
# XPU_TIMER_SID_PYTHON  the prefix (default: $XDG_CACHE_HOME or ~/.cache, /xpu-timer/sid-python)
# XPU_TIMER_SID_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail

prefix=${XPU_TIMER_SID_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/xpu-timer/sid-python}
mirror=${XPU_TIMER_SID_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# The interpreters, and what they and the tests' target (ctypes, asyncio,
# ssl, json, tempfile) load. libc6 is sid's own: the interpreters are built
# against it, and it runs only inside the prefix.
pkgs=(
	python3.14-minimal libpython3.14-minimal libpython3.14-stdlib
	python3.15-minimal libpython3.15-minimal libpython3.15-stdlib
	libc6 libgcc-s1 libexpat1 zlib1g libssl3t64 libffi8 libzstd1 liblzma5 libbz2-1.0
	libuuid1 libsqlite3-0 libncursesw6 libtinfo6 libreadline8t64 libmpdec4
)
stamp=$prefix/.xpu-timer-complete
want="$mirror ${pkgs[*]}"
complete() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }
complete && exit 0
# One fetch at a time (worktrees of one machine share the prefix); the
# one that waited finds the prefix complete.
mkdir -p "$(dirname "$prefix")"
exec 9>"$prefix.lock"
flock 9
complete && exit 0

apt=$prefix.apt
mark=.xpu-timer-sid-python
ours=false # whether $prefix and $apt are this script's to remove
fail() {
	echo "sid-python: $*" >&2
	if $ours; then
		rm -rf "$apt" "$prefix"
	fi
	exit 1
}
for tool in apt-get dpkg dpkg-deb; do
	command -v "$tool" >/dev/null || fail "$tool not found: the sid interpreters are fetched with Debian's apt"
done
[ -f "$keyring" ] || fail "no $keyring (package debian-archive-keyring) to check sid's signatures with"

# Only a directory this script made is removed: XPU_TIMER_SID_PYTHON may
# name anything.
for d in "$prefix" "$apt"; do
	if [ -e "$d" ] && [ -n "$(ls -A "$d")" ] && [ ! -e "$d/$mark" ] && [ ! -e "$d/${stamp##*/}" ]; then
		fail "$d exists and was not made by $0: set XPU_TIMER_SID_PYTHON to a new directory"
	fi
done
ours=true
rm -rf "$apt" "$prefix"
mkdir -p "$prefix" && touch "$prefix/$mark"
mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/etc/apt.conf.d" \
	"$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
touch "$apt/$mark"
: >"$apt/state/status"
cat >"$apt/etc/sources.list.d/sid.sources" <<EOF
Types: deb
URIs: $mirror
Suites: sid
Components: main
Signed-By: $keyring
EOF
opts=(
	-o "Dir::Etc=$apt/etc" -o "Dir::Etc::SourceList=/dev/null"
	-o "Dir::Etc::SourceParts=$apt/etc/sources.list.d" -o "Dir::Etc::Parts=$apt/etc/apt.conf.d"
	-o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d"
	-o "Dir::State=$apt/state" -o "Dir::State::status=$apt/state/status" -o "Dir::Cache=$apt/cache"
	-o APT::Architecture=amd64 -o APT::Architectures=amd64 -o Acquire::Languages=none
	-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
	-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
	-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
	-o Acquire::Retries=3 -o Debug::NoLocking=1 -o APT::Sandbox::User=root
)
# apt-get reports a source it cannot reach as a warning ("W: Failed to
# fetch") and still exits 0: the package list is what tells.
echo "sid-python: fetching Debian sid's package list from $mirror"
if ! apt-get "${opts[@]}" -qq update >"$apt/update.log" 2>&1 ||
	! ls "$apt/state/lists/"*_sid_main_binary-amd64_Packages* >/dev/null 2>&1; then
	cat "$apt/update.log" >&2
	fail "cannot read Debian sid from $mirror (set XPU_TIMER_SID_MIRROR to a reachable mirror); the tests of CPython 3.14 and 3.15 need it"
fi
echo "sid-python: downloading ${pkgs[*]}"
(cd "$apt/debs" && apt-get "${opts[@]}" -qq download "${pkgs[@]}") ||
	fail "apt-get download from $mirror failed"
for deb in "$apt/debs"/*.deb; do
	dpkg -x "$deb" "$prefix"
done
libs=$prefix/usr/lib/x86_64-linux-gnu # sid merged /lib into /usr/lib
for v in 3.14 3.15; do
	"$libs/ld-linux-x86-64.so.2" --library-path "$libs" "$prefix/usr/bin/python$v" -I -c \
		'import asyncio, ctypes, faulthandler, json, tempfile, threading' ||
		fail "python$v from sid does not run in $prefix"
done
rm -rf "$apt"
echo "$want" >"$stamp"
echo "sid-python: CPython 3.14 and 3.15 in $prefix"
