package caps

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPtraceAllowedYamaNoAttach(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ptrace_scope")
	if err := os.WriteFile(f, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(s string) { yamaScope = s }(yamaScope)
	yamaScope = f
	if ok, why := PtraceAllowed(); ok || why != "kernel.yama.ptrace_scope is 3 (ptrace disabled)" {
		t.Fatalf("PtraceAllowed() = %v, %q with Yama at 3", ok, why)
	}
	if err := os.WriteFile(f, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok, why := PtraceAllowed()
	if want := Has(SysPtrace); ok != want || ok != (why == "") {
		t.Fatalf("PtraceAllowed() = %v, %q with Yama at 1, CAP_SYS_PTRACE %v", ok, why, want)
	}
}
