package viewer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/viewer/protodump"
)

// The dump directory is shared: other nodes and users write into it. The
// viewer reads only regular files named *.stacktrace that lie in it, opens
// them without following a symbolic link or blocking on a FIFO, and reads
// at most MaxFileSize bytes of each; everything else it skips and names.

// Errors a skipped input wraps; test with errors.Is.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("stack file too large")
)

// DefaultMaxFileSize bounds one stack file: a rank of 1,000 threads of 100
// frames is about 20 MB.
const DefaultMaxFileSize = 256 << 20

// loaded is one readable dump, or why its file was skipped.
type loaded struct {
	path     string
	rank     int // from the file name when it has the RRRRR-WWWWW form
	world    int // from the file name; 0 when the name has another form
	file     *dumpfile.File
	modified time.Time
	err      error
}

// list returns the dump files of dir (timeline.List), sorted, and the
// entries named *.stacktrace that are not regular files, each with the
// reason.
func list(dir string) ([]string, []Skipped, error) {
	paths, odd, err := timeline.List(dir)
	if err != nil {
		return nil, nil, err
	}
	var skipped []Skipped
	for _, e := range odd {
		skipped = append(skipped, Skipped{Path: e.Path, Err: fmt.Errorf("%s: %w: %s", e.Path, ErrNotRegular, kind(dir, e.Path, e.Mode))})
	}
	return paths, skipped, nil
}

// kind describes a directory entry that is not a regular file.
func kind(dir, path string, m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return "a symbolic link, not followed"
		}
		st, err := os.Stat(path)
		abs := target
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(dir, target)
		}
		switch rel, rerr := filepath.Rel(dir, filepath.Clean(abs)); {
		case err != nil:
			return fmt.Sprintf("a dangling symbolic link (to %s)", target)
		case rerr != nil || rel == ".." || strings.HasPrefix(rel, "../"):
			return fmt.Sprintf("a symbolic link to %s, outside %s, not followed", target, dir)
		case !st.Mode().IsRegular():
			return fmt.Sprintf("a symbolic link to %s, %s", target, modeWord(st.Mode()))
		}
		return fmt.Sprintf("a symbolic link (to %s), not followed", target)
	default:
		return modeWord(m)
	}
}

func modeWord(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file"
}

// readFile reads path if it is a regular file of at most limit bytes. It
// opens with O_NOFOLLOW and O_NONBLOCK, so a symbolic link or a FIFO put in
// place after the listing is refused rather than followed or waited on, and
// checks the type on the open descriptor.
func readFile(path string, limit int64) ([]byte, time.Time, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, time.Time{}, fmt.Errorf("%s: %w: a symbolic link, not followed", path, ErrNotRegular)
		}
		return nil, time.Time{}, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, time.Time{}, fmt.Errorf("%s: %w: %s", path, ErrNotRegular, modeWord(st.Mode()))
	}
	if st.Size() > limit {
		return nil, time.Time{}, fmt.Errorf("%s: %w: %d bytes, the limit is %d", path, ErrTooLarge, st.Size(), limit)
	}
	// One read of the size fstat gave, and one byte more to see a file that
	// grew since; what it grew by is read up to the limit.
	data := make([]byte, st.Size()+1)
	n, err := io.ReadFull(f, data)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		data = data[:n]
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("read %s: %w", path, err)
	default:
		rest, err := io.ReadAll(io.LimitReader(f, limit+1-int64(n)))
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("read %s: %w", path, err)
		}
		data = append(data, rest...)
	}
	if int64(len(data)) > limit {
		return nil, time.Time{}, fmt.Errorf("%s: %w: grew past the limit of %d bytes while read", path, ErrTooLarge, limit)
	}
	return data, st.ModTime(), nil
}

// decode reads one file: our JSON, or xpu_timer's protobuf.
func decode(path string, limit int64) loaded {
	l := loaded{path: path}
	l.rank, l.world, _ = dumpfile.ParseName(path)
	data, mod, err := readFile(path, limit)
	if err != nil {
		l.err = err
		return l
	}
	l.modified = mod
	// JSON may start with white space; a protobuf message starts with a
	// tag, which may be the byte of a newline (field 1, length-delimited).
	head := bytes.TrimLeft(data, " \t\r\n")
	if len(head) > 0 && head[0] != '{' && protodump.Likely(data) {
		if l.world == 0 {
			l.err = fmt.Errorf("%s: %w: an xpu_timer protobuf file needs its RRRRR-WWWWW name for the world size", path, dumpfile.ErrCorrupt)
			return l
		}
		if l.file, err = protodump.Parse(data, l.world); err != nil {
			l.err = fmt.Errorf("%s: %w: %w", path, dumpfile.ErrCorrupt, err)
		}
		return l
	}
	if l.file, err = dumpfile.Parse(data); err != nil {
		l.err = fmt.Errorf("%s: %w", path, err)
	}
	return l
}

// load reads paths on every CPU and hands each result to use, one at a
// time, in the order of paths (so that what is merged never depends on
// timing). At most about 2×workers decoded files are alive at once.
func load(paths []string, workers int, limit int64, use func(loaded)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	results := make([]chan loaded, len(paths))
	for i := range results {
		results[i] = make(chan loaded, 1)
	}
	window := make(chan struct{}, 2*workers) // files read and not yet used
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				results[i] <- decode(paths[i], limit)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(jobs)
		for i := range paths {
			select {
			case window <- struct{}{}:
			case <-done:
				return
			}
			jobs <- i
		}
	}()
	for i := range paths {
		use(<-results[i])
		<-window
	}
	close(done)
	wg.Wait()
}
