// Package symbols turns addresses of a live process into function names,
// modules and source lines, and hands the unwinder each module's call frame
// information. Parsed ELF files are cached by build-id (or by device, inode,
// size and modification time when a file has no build-id) across processes
// and dumps.
package symbols

import (
	"container/list"
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

// DefaultCacheBytes is the memory a Cache holds at most unless told
// otherwise: a quarter of the agent's 1 GiB limit (deploy/), room for the
// libraries of a PyTorch job with libc's debug information several times.
const DefaultCacheBytes = 256 << 20

// maxFailed bounds how many files that are not ELF the cache remembers.
const maxFailed = 4096

// Cache holds parsed ELF files, up to a limit in bytes (Object.Bytes):
// past it the least recently used are dropped (LRU). A dropped object
// stays usable by whoever holds it, and is freed with its last user. It
// is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	byStat  map[string]*Object // "dev:ino:size:mtime"
	byBuild map[string]*Object // build-id
	failed  map[string]error   // stat keys that are not ELF files
	limit   int64
	lru     list.List                 // of *cached, most recently used first
	entries map[*Object]*list.Element // the element of each object held
	evicted int64
}

// cached is an object the cache holds and the keys it is held by.
type cached struct {
	o    *Object
	keys []string // in byStat
}

// NewCache returns an empty cache holding up to DefaultCacheBytes.
func NewCache() *Cache {
	return &Cache{byStat: map[string]*Object{}, byBuild: map[string]*Object{}, failed: map[string]error{},
		limit: DefaultCacheBytes, entries: map[*Object]*list.Element{}}
}

// SetLimit sets the bytes the cache holds at most (Object.Bytes of every
// object held; n <= 0 means DefaultCacheBytes), dropping what is over it.
func (c *Cache) SetLimit(n int64) {
	if n <= 0 {
		n = DefaultCacheBytes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = n
	c.trim(nil)
}

// Len returns how many distinct objects the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Bytes returns the memory the objects held take (Object.Bytes), and how
// many objects were dropped to keep it under the limit.
func (c *Cache) Bytes() (held, evicted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes(), c.evicted
}

func (c *Cache) bytes() int64 {
	var n int64
	for e := c.lru.Front(); e != nil; e = e.Next() {
		n += e.Value.(*cached).o.Bytes()
	}
	return n
}

// used marks o, held, as the most recently used, and drops the least
// recently used objects while the cache is over its limit: objects grow
// as they are read, so every use checks. Called with mu held.
func (c *Cache) used(o *Object) {
	if e, ok := c.entries[o]; ok {
		c.lru.MoveToFront(e)
	}
	c.trim(o)
}

// trim drops the least recently used objects, never keep, while the cache
// holds more than its limit. Called with mu held.
func (c *Cache) trim(keep *Object) {
	total := c.bytes()
	for e := c.lru.Back(); e != nil && total > c.limit; {
		prev := e.Prev()
		ce := e.Value.(*cached)
		if ce.o != keep {
			total -= ce.o.Bytes()
			c.drop(e)
		}
		e = prev
	}
}

// drop forgets one object. Called with mu held.
func (c *Cache) drop(e *list.Element) {
	ce := c.lru.Remove(e).(*cached)
	delete(c.entries, ce.o)
	for _, k := range ce.keys {
		if c.byStat[k] == ce.o {
			delete(c.byStat, k)
		}
	}
	if id := ce.o.BuildID; id != "" && c.byBuild[id] == ce.o {
		delete(c.byBuild, id)
	}
	c.evicted++
}

// object returns the parsed object mapped at m in the process whose /proc
// directory is dir; lines says whether its lookups will want source lines
// (see openObject).
func (c *Cache) object(dir string, m procfs.Mapping, lines bool) (*Object, error) {
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
		if o, err, hit := c.lookup(key); hit {
			return o, err
		}
		o, err := openObject(m.Path, st.Size, fileOpener(p), lines)
		if err != nil {
			c.mu.Lock()
			if len(c.failed) >= maxFailed {
				clear(c.failed)
			}
			c.failed[key] = err
			c.mu.Unlock()
			return nil, err
		}
		return c.add(key, o), nil
	}
	return nil, fmt.Errorf("open %s: %w", m.Path, lastErr)
}

// lookup returns the object held under a stat key, or why that file is
// not one; hit is false when the key is unknown.
func (c *Cache) lookup(key string) (o *Object, err error, hit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.byStat[key]; ok {
		c.used(o)
		return o, nil, true
	}
	if err, ok := c.failed[key]; ok {
		return nil, err, true
	}
	return nil, nil, false
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
				c.hold(old, key)
			}
			c.used(old)
			return old
		}
		c.byBuild[o.BuildID] = o
	}
	c.hold(o, key)
	c.used(o)
	return o
}

// hold records o under key ("" for none). Called with mu held.
func (c *Cache) hold(o *Object, key string) {
	e, ok := c.entries[o]
	if !ok {
		e = c.lru.PushFront(&cached{o: o})
		c.entries[o] = e
	}
	if key != "" {
		c.byStat[key] = o
		ce := e.Value.(*cached)
		ce.keys = append(ce.keys, key)
	}
}

// maxVDSO bounds the vDSO image read: it is two pages on x86-64.
const maxVDSO = 1 << 20

// vdso returns the parsed vDSO image of a process, read from its memory
// (dir is its /proc directory).
func (c *Cache) vdso(dir string, m procfs.Mapping) (*Object, error) {
	if m.End <= m.Start || m.End-m.Start > maxVDSO {
		return nil, fmt.Errorf("read vdso: mapping of %d bytes", m.End-m.Start)
	}
	img := make([]byte, m.End-m.Start)
	f, err := rawfile.Open(dir + "/mem")
	if err != nil {
		return nil, fmt.Errorf("read vdso: %w", err)
	}
	defer f.Close()
	if _, err := f.ReadAt(img, int64(m.Start)); err != nil {
		return nil, fmt.Errorf("read vdso: %w", err)
	}
	o, err := openObject("[vdso]", int64(len(img)), bytesOpener(img), false)
	if err != nil {
		return nil, err
	}
	if o.BuildID == "" {
		return o, nil // not shared: no key
	}
	return c.add("", o), nil
}
