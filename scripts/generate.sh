#!/usr/bin/env bash
# Rebuilds the committed BPF objects (ebpf/probes_x86_bpfel.{go,o}) with the
# pinned clang (clang-16, see ebpf/gen.go). With --check, generates into a
# temporary copy instead and fails when the committed output differs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

if ! command -v clang-16 >/dev/null; then
	echo "generate: clang-16 is missing (scripts/deps.sh installs it)" >&2
	exit 1
fi

if [ "${1:-}" != "--check" ]; then
	(cd ebpf && go generate ./...)
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The same bpf2go line as ebpf/gen.go, writing into $tmp.
args=$(sed -n 's|^//go:generate go tool bpf2go ||p' ebpf/gen.go)
(cd ebpf && eval "go tool bpf2go -go-package ebpf -output-dir \"$tmp\" $args" >/dev/null)
status=0
for f in probes_x86_bpfel.go probes_x86_bpfel.o; do
	if ! cmp -s "ebpf/$f" "$tmp/$f"; then
		echo "generate: ebpf/$f differs from what ebpf/probes.bpf.c produces; run make generate" >&2
		status=1
	fi
done
exit $status
