#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/apt-packages.txt, enabling
# Debian's contrib and non-free components (NVIDIA's libcudart and libnvml
# live there) on the mirrors and suites the machine's apt sources already
# use; then fetches Debian sid's CPython 3.14 and 3.15 into a private
# prefix (scripts/sid-python.sh). Idempotent: does nothing when everything
# is installed.
# scripts/deps.sh --print-nonfree prints the sources it would add.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_dir=${XPU_TIMER_APT_DIR:-/etc/apt}
nonfree=$apt_dir/sources.list.d/xpu-timer-nonfree.sources

# nonfree_sources prints, in deb822 form, one source per Debian source the
# machine already uses for "main" (its own mirror, suites, key and
# options), with the components contrib and non-free instead; a source that
# already has both is left out. It reads the deb822 .sources files and the
# classic one-line sources.list files under $apt_dir, except our own.
nonfree_sources() {
	local deb822=() classic=()
	for f in "$apt_dir"/sources.list.d/*.sources; do
		[ -f "$f" ] && [ "$f" != "$nonfree" ] && deb822+=("$f")
	done
	for f in "$apt_dir"/sources.list "$apt_dir"/sources.list.d/*.list; do
		[ -f "$f" ] && classic+=("$f")
	done
	{
		# deb822: paragraphs of Field: value, continuation lines start with
		# a space; "Enabled: no" turns a paragraph off.
		[ ${#deb822[@]} -eq 0 ] || awk '
			function flush(   k, comps) {
				comps = " " tolower(v["components"]) " "
				if (v["types"] ~ /(^|[ \t])deb([ \t]|$)/ && comps ~ / main / && !(comps ~ / contrib / && comps ~ / non-free /) && tolower(v["enabled"]) != "no") {
					print "Types: deb"
					print "URIs: " v["uris"]
					print "Suites: " v["suites"]
					print "Components: contrib non-free"
					for (k in v) if (k != "types" && k != "uris" && k != "suites" && k != "components" && k != "enabled") print orig[k] ": " v[k]
					print ""
				}
				delete v; delete orig; last = ""
			}
			FNR == 1 && NR > 1 { flush() }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			/^[ \t]/ { if (last != "") v[last] = v[last] "\n" $0; next }
			{
				i = index($0, ":"); if (i == 0) next
				name = substr($0, 1, i - 1); key = tolower(name)
				val = substr($0, i + 1); sub(/^[ \t]+/, "", val); sub(/[ \t]+$/, "", val)
				v[key] = val; orig[key] = name; last = key
			}
			END { flush() }' "${deb822[@]}"
		# classic: deb [opt=value ...] URI SUITE COMPONENT...
		[ ${#classic[@]} -eq 0 ] || awk '
			{ sub(/#.*/, "") }
			$1 != "deb" { next }
			{
				line = $0; sub(/^[ \t]*deb[ \t]+/, "", line); opts = ""
				if (substr(line, 1, 1) == "[") {
					e = index(line, "]"); if (e == 0) next
					opts = substr(line, 2, e - 2); line = substr(line, e + 1)
				}
				n = split(line, f, /[ \t]+/); j = 0
				for (i = 1; i <= n; i++) if (f[i] != "") w[++j] = f[i]
				if (j < 3) next
				comps = " "; for (i = 3; i <= j; i++) comps = comps w[i] " "
				if (comps !~ / main / || (comps ~ / contrib / && comps ~ / non-free /)) next
				print "Types: deb"; print "URIs: " w[1]; print "Suites: " w[2]; print "Components: contrib non-free"
				m = split(opts, o, /[ \t]+/)
				for (i = 1; i <= m; i++) {
					if (o[i] == "") continue
					k = o[i]; val = k; sub(/=.*/, "", k); sub(/^[^=]*=/, "", val)
					if (k == "signed-by") print "Signed-By: " val
					else if (k == "arch") print "Architectures: " val
					else if (k == "trusted") print "Trusted: " val
				}
				print ""
			}' "${classic[@]}"
	}
}

if [ "${1:-}" = --print-nonfree ]; then
	nonfree_sources
	exit 0
fi

# Debian sid's CPython 3.14 and 3.15 in a private prefix, for the tests of
# collector/capture/python (nothing of the system's packages changes).
scripts/sid-python.sh

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

# Written from the machine's own sources; one from an older deps.sh, which
# named deb.debian.org whatever the machine used, is written again.
marker="# written by scripts/deps.sh from the apt sources under $apt_dir"
if ! grep -qxF "$marker" "$nonfree" 2>/dev/null; then
	srcs=$(nonfree_sources)
	if [ -z "$srcs" ]; then
		rm -f "$nonfree"
		echo "deps: no apt source with Debian's main component under $apt_dir to add contrib and non-free to; add them by hand" >&2
	else
		printf '%s\n%s\n' "$marker" "$srcs" >"$nonfree"
	fi
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
