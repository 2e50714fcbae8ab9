// Package symbols turns addresses of a live process into function names,
// modules and source lines, and hands the unwinder each module's call frame
// information. Parsed ELF files are cached by build-id (or by device, inode,
// size and modification time when a file has no build-id) across processes
// and dumps.
package symbols

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// Cache holds parsed ELF files. It is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	byStat  map[string]*Object // "dev:ino:size:mtime"
	byBuild map[string]*Object // build-id
	failed  map[string]error   // stat keys that are not ELF files
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{byStat: map[string]*Object{}, byBuild: map[string]*Object{}, failed: map[string]error{}}
}

// Len returns how many distinct objects the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[*Object]bool{}
	for _, o := range c.byStat {
		seen[o] = true
	}
	for _, o := range c.byBuild {
		seen[o] = true
	}
	return len(seen)
}

// object returns the parsed object mapped at m in the process whose /proc
// directory is dir.
func (c *Cache) object(dir string, m procfs.Mapping) (*Object, error) {
	// The path as we see it when it is the very file mapped (same device
	// and inode), else the path under the process's root (a container's
	// view), else the mapped file itself (it survives deletion).
	cands := []string{
		m.Path,
		dir + "/root" + m.Path,
		fmt.Sprintf("%s/map_files/%x-%x", dir, m.Start, m.End),
	}
	var lastErr error
	for i, p := range cands {
		fi, err := os.Stat(p)
		if err != nil {
			lastErr = err
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.Mode().IsRegular() {
			lastErr = fmt.Errorf("%s is not a regular file", p)
			continue
		}
		if m.Inode != 0 && st.Ino != m.Inode || i == 0 && !sameDev(m.Dev, uint64(st.Dev)) {
			lastErr = fmt.Errorf("%s is not the file mapped", p)
			continue
		}
		key := fmt.Sprintf("%d:%d:%d:%d", st.Dev, st.Ino, st.Size, fi.ModTime().UnixNano())
		c.mu.Lock()
		o, hit := c.byStat[key]
		ferr := c.failed[key]
		c.mu.Unlock()
		if hit {
			return o, nil
		}
		if ferr != nil {
			return nil, ferr
		}
		o, err = openObject(m.Path, st.Size, fileOpener(p))
		if err != nil {
			c.mu.Lock()
			c.failed[key] = err
			c.mu.Unlock()
			return nil, err
		}
		return c.add(key, o), nil
	}
	return nil, fmt.Errorf("open %s: %w", m.Path, lastErr)
}

// sameDev reports whether a device as /proc/PID/maps spells it ("fd:01",
// hexadecimal major and minor) is dev.
func sameDev(maps string, dev uint64) bool {
	major, minor, ok := strings.Cut(maps, ":")
	if !ok {
		return false
	}
	ma, err1 := strconv.ParseUint(major, 16, 32)
	mi, err2 := strconv.ParseUint(minor, 16, 32)
	return err1 == nil && err2 == nil && uint64(unix.Major(dev)) == ma && uint64(unix.Minor(dev)) == mi
}

// add records o under its keys, returning an equal object already cached.
func (c *Cache) add(key string, o *Object) *Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.BuildID != "" {
		if old, ok := c.byBuild[o.BuildID]; ok {
			if key != "" {
				c.byStat[key] = old
			}
			return old
		}
		c.byBuild[o.BuildID] = o
	}
	if key != "" {
		c.byStat[key] = o
	}
	return o
}

// vdso returns the parsed vDSO image of a process, read from its memory
// (dir is its /proc directory).
func (c *Cache) vdso(dir string, m procfs.Mapping) (*Object, error) {
	img := make([]byte, m.End-m.Start)
	f, err := rawfile.Open(dir + "/mem")
	if err != nil {
		return nil, fmt.Errorf("read vdso: %w", err)
	}
	defer f.Close()
	if _, err := f.ReadAt(img, int64(m.Start)); err != nil {
		return nil, fmt.Errorf("read vdso: %w", err)
	}
	o, err := openObject("[vdso]", int64(len(img)), bytesOpener(img))
	if err != nil {
		return nil, err
	}
	if o.BuildID == "" {
		return o, nil // not shared: no key
	}
	return c.add("", o), nil
}
