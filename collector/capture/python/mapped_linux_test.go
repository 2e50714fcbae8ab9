package python

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// A process that maps an interpreter's file to read it (as the symbol
// cache of this very monitor does) is not a Python process.
func TestDataMappingIsNotPython(t *testing.T) {
	// Every interpreter installed, and its libpython where it is a
	// shared build, mapped as data.
	var paths []string
	for _, py := range interpreters {
		libs, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(py.path)), "lib", "libpython3*.so.1.0"))
		for _, p := range append(libs, py.path) {
			if _, err := os.Stat(p); err == nil {
				paths = append(paths, p)
			}
		}
	}
	if len(paths) == 0 {
		t.Fatal("no interpreter installed (make deps installs them)")
	}
	for _, p := range paths {
		b, err := mapToRead(p)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(b)
	}
	maps, err := procfs.Maps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMapped(os.Getpid(), maps); !errors.Is(err, ErrNotPython) {
		t.Fatalf("with %q mapped to read: %v, want ErrNotPython", paths, err)
	}
}

// mapToRead maps the whole file at path, read only.
func mapToRead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
}
