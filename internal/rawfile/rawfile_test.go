package rawfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestReadAt(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789"), 1000)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 100)
	if n, err := f.ReadAt(b, 5000); n != 100 || err != nil || !bytes.Equal(b, want[5000:5100]) {
		t.Errorf("ReadAt(100 at 5000) = %d, %v, %q", n, err, b[:n])
	}
	// Past the end: what there is, and io.EOF, as io.ReaderAt says.
	if n, err := f.ReadAt(b, int64(len(want)-30)); n != 30 || err != io.EOF || !bytes.Equal(b[:n], want[len(want)-30:]) {
		t.Errorf("ReadAt at the end = %d, %v", n, err)
	}
	if n, err := f.ReadAt(b, -1); n != 0 || err == nil {
		t.Errorf("ReadAt(-1) = %d, %v", n, err)
	}
	var fd int
	if err := f.Control(func(d int) { fd = d }); err != nil || fd < 0 {
		t.Errorf("Control: fd %d, %v", fd, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.ReadAt(b, 0); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("ReadAt after Close: %v", err)
	}
	if err := f.Control(func(int) { t.Error("Control ran after Close") }); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("Control after Close: %v", err)
	}
}

func TestReadFile(t *testing.T) {
	// /proc files report size 0: read until the end, past the first buffer.
	b, err := ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1024 || !bytes.Contains(b, []byte("[stack]")) {
		t.Errorf("/proc/self/maps: %d bytes", len(b))
	}
	_, err = ReadFile(filepath.Join(t.TempDir(), "missing"))
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a missing file: %v", err)
	}
}
