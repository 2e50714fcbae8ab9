package cpuprofile

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// With the variable set, a run leaves a CPU profile that parses and holds
// samples, named with the pid where "%p" asks; unset, nothing is written;
// an unwritable path costs the run nothing but the profile.
func TestStart(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(Env, filepath.Join(dir, "cpu.%p.pprof"))
	stop := Start()
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	stop()
	path := filepath.Join(dir, "cpu."+strconv.Itoa(os.Getpid())+".pprof")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if len(p.Sample) == 0 {
		t.Fatalf("no samples in %s after 300 ms on the CPU", path)
	}

	t.Setenv(Env, "")
	Start()()
	t.Setenv(Env, filepath.Join(dir, "missing", "cpu.pprof"))
	Start()()
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files %v, want the one profile", ents)
	}
}
