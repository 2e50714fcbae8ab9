package stack

import (
	"fmt"
	"path/filepath"
	"strings"
)

// systemModules are the libraries whose frames are where every wait ends
// (futex, poll, nanosleep), never what it waits for.
var systemModules = []string{"libc.so", "libc-", "libpthread", "ld-linux", "libstdc++", "libgcc_s", "[vdso]", "[uprobes]"}

// WaitSite names where the main thread (tid == pid) of a dumped process
// waits: its innermost Python frame (function, file, line) and its
// innermost native frame outside the C and C++ runtimes, e.g.
// "time.sleep (job.py:41) in gloo::transport::tcp::UnboundBuffer::waitRecv".
// "" when the dump has no stacks of it.
func WaitSite(pid int, threads []Thread) string {
	for _, th := range threads {
		if th.TID != pid {
			continue
		}
		var parts []string
		if len(th.Python) > 0 {
			f := th.Python[0]
			parts = append(parts, fmt.Sprintf("%s (%s:%d)", f.Func, filepath.Base(f.File), f.Line))
		}
		for _, f := range th.Native {
			if f.Func == "" || f.Func == "??" || System(f.Module) {
				continue
			}
			parts = append(parts, f.Func)
			break
		}
		return strings.Join(parts, " in ")
	}
	return ""
}

// System says whether module is one of the C and C++ runtimes, whose
// frames are where every wait ends, never what it waits for.
func System(module string) bool {
	base := filepath.Base(module)
	for _, m := range systemModules {
		if strings.HasPrefix(base, m) {
			return true
		}
	}
	return false
}
