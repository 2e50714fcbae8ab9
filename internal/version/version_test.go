package version

import (
	"os"
	"regexp"
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

// make build gives the binaries the tags the tests build them with.
func TestBuildTagsMatchMakefile(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^GOTAGS\s*:=\s*(\S+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no GOTAGS")
	}
	if string(m[1]) != BuildTags {
		t.Errorf("Makefile GOTAGS = %q, BuildTags = %q", m[1], BuildTags)
	}
	if !regexp.MustCompile(`(?m)^\t\$\(GO\) build -tags \$\(GOTAGS\) `).Match(b) {
		t.Error("make build does not build with -tags $(GOTAGS)")
	}
}
