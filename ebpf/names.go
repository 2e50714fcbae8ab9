package ebpf

import (
	"bytes"

	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// keptName names a kernel from what a probe kept of its name: buf, the
// whole func_names value, holds it NUL-terminated, cut at len(buf)-1 bytes
// (FUNC_NAME_LEN). Demangled; a name cut short, which the demangler
// refuses, as far as it reads (symbols.DemanglePrefix): torch's templated
// kernels are longer than the probe keeps.
func keptName(buf []byte) string {
	raw := buf
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		raw = raw[:i]
	}
	name := symbols.Demangle(string(raw))
	if len(raw) == len(buf)-1 && name == string(raw) {
		if p, ok := symbols.DemanglePrefix(name); ok {
			return p
		}
	}
	return name
}
