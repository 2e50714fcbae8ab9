// Package atomicfile writes files that readers see whole or not at all:
// the one atomic write of the project (dumps, their text twins, traces,
// markers, the viewer's outputs).
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write writes data to path as WriteFunc does.
func Write(path string, data []byte) error {
	return WriteFunc(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc writes what write writes to path through a temporary
// file in the same directory (created anew, mode 0644), synced, and a
// rename: a reader sees the old file or the new one, never a part, and a
// symbolic link at path is replaced, never followed.
func WriteFunc(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<16)
	if err := write(bw); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		d.Sync() // make the rename durable; best effort
		d.Close()
	}
	return nil
}
