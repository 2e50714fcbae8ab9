// Package rawfile reads files with open(2), pread(2) and close(2) alone.
//
// os.Open also makes the descriptor non-blocking and offers it to the
// network poller (fcntl and epoll_ctl), and sets a finalizer: a dump opens
// hundreds of libraries and /proc files, and on a VM, where a system call
// costs several microseconds, those extra calls were a noticeable part of
// a first dump (docs/measurements.md). A regular file or a /proc file gains nothing from the poller.
package rawfile

import (
	"errors"
	"io"
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"
)

// File is an open file, read at offsets. It is safe for concurrent use;
// reads after Close fail.
type File struct {
	mu   sync.RWMutex // held shared by reads, exclusive by Close: fd is never reused under a read
	fd   int
	name string
}

// Open opens a file read-only.
func Open(name string) (*File, error) {
	fd, err := open(name)
	if err != nil {
		return nil, err
	}
	return &File{fd: fd, name: name}, nil
}

func open(name string) (int, error) {
	for {
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return fd, nil
	}
}

// ReadAt reads len(b) bytes at off, as io.ReaderAt does: fewer only at the
// end of the file (io.EOF) or on an error.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: errors.New("negative offset")}
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fd < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrClosed}
	}
	n := 0
	for n < len(b) {
		k, err := unix.Pread(f.fd, b[n:], off+int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, &fs.PathError{Op: "read", Path: f.name, Err: err}
		case k == 0:
			return n, io.EOF
		}
		n += k
	}
	return n, nil
}

// Control calls fn with the file's descriptor, which stays open meanwhile.
func (f *File) Control(fn func(fd int)) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fd < 0 {
		return &fs.PathError{Op: "control", Path: f.name, Err: fs.ErrClosed}
	}
	fn(f.fd)
	return nil
}

// Close closes the file; a second Close does nothing.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	if err != nil {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

// ReadFile reads a whole file, sized as it reads: /proc files show size 0.
func ReadFile(name string) ([]byte, error) {
	fd, err := open(name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			// Twice as large: a proc file (a torch rank's maps is 200
			// KB) is read in a read per buffer, a syscall each.
			b = append(make([]byte, 0, 2*cap(b)), b...)
		}
		k, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		case k == 0:
			return b, nil
		}
		b = b[:len(b)+k]
	}
}
