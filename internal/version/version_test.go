package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	defer func(v, r string) { Version, Revision = v, r }(Version, Revision)
	Version, Revision = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
	want := "v1.2.3 (revision 0123456789ab, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	Version, Revision = "dev", "unknown"
	if got := String(); !strings.HasPrefix(got, "dev (revision unknown, go") {
		t.Fatalf("unstamped String() = %q", got)
	}
}
