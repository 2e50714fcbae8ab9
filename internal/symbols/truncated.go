package symbols

import (
	"strconv"
	"strings"
)

// DemanglePrefix names a C++ function whose mangled name was cut short (a
// probe keeps a bounded prefix of a kernel's name: 127 bytes), which the
// demangler refuses: the components of its name, "::"-joined, then "<…>"
// where template arguments begin, or "…" where the cut or anything else
// ends the reading. A torch kernel's
//
//	_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribution_elementwise_grid_stride_kernelIfLi4EZNS0_9t
//
// reads at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<…>.
// It says false when raw is no mangled name or yields no component.
func DemanglePrefix(raw string) (string, bool) {
	s, ok := strings.CutPrefix(raw, "_Z")
	if !ok {
		return "", false
	}
	nested := strings.HasPrefix(s, "N")
	if nested {
		s = strings.TrimLeft(s[1:], "rVK") // a member function's qualifiers
	}
	var parts []string
	tail := "…"
	for len(s) > 0 {
		if strings.HasPrefix(s, "St") {
			parts, s = append(parts, "std"), s[2:]
			continue
		}
		n := 0
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		if n == 0 {
			switch {
			case s[0] == 'I':
				tail = "<…>"
			case s[0] == 'E' && nested, !nested:
				tail = "" // the whole name, or a plain function's
			}
			break
		}
		size, err := strconv.Atoi(s[:n])
		if err != nil || size <= 0 {
			break
		}
		s = s[n:]
		id := s[:min(size, len(s))]
		if strings.HasPrefix(id, "_GLOBAL__N") {
			id = "(anonymous namespace)"
		}
		parts = append(parts, id)
		if size > len(s) {
			break // cut inside the identifier
		}
		s = s[size:]
		if !nested {
			if strings.HasPrefix(s, "I") {
				tail = "<…>"
			} else {
				tail = ""
			}
			break
		}
	}
	if len(parts) == 0 {
		return "", false
	}
	return strings.Join(parts, "::") + tail, true
}
