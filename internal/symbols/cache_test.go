package symbols

import (
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// sizedObject is a parsed library of about n bytes of symbol names.
func sizedObject(t *testing.T, i, n int) *Object {
	t.Helper()
	name := fmt.Sprintf("f%d_%s", i, strings.Repeat("x", n))
	symtab, strtab := testutil.Symbols(testutil.Symbol{Name: name, Type: elf.STT_FUNC, Value: 0x1000, Size: 16})
	lib := testutil.ELF(
		testutil.Section{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 2, Entsize: elf.Sym64Size, Data: symtab},
		testutil.Section{Name: ".strtab", Type: elf.SHT_STRTAB, Data: strtab},
	)
	o, err := openObject(fmt.Sprintf("/lib%d.so", i), int64(len(lib)), bytesOpener(lib), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.loadSymbols(); err != nil {
		t.Fatal(err)
	}
	return o
}

// The cache keeps to its limit in bytes, dropping the least recently
// used objects (issue 16: it never evicted).
func TestCacheEvicts(t *testing.T) {
	objs := make([]*Object, 8)
	for i := range objs {
		objs[i] = sizedObject(t, i, 64<<10)
	}
	per := objs[0].Bytes()
	if per < 64<<10 {
		t.Fatalf("an object of 64 KiB of names counts %d bytes", per)
	}
	c := NewCache()
	c.SetLimit(3*per + per/2)
	for i := 0; i < 5; i++ {
		c.add(fmt.Sprint(i), objs[i])
	}
	held, evicted := c.Bytes()
	if c.Len() != 3 || evicted != 2 || held > 3*per+per/2 {
		t.Fatalf("holds %d objects, %d bytes, %d evicted; want 3, at most %d, 2", c.Len(), held, evicted, 3*per+per/2)
	}
	// 2, 3, 4 held; using 2 makes 3 the least recently used.
	if o, _, hit := c.lookup("2"); !hit || o != objs[2] {
		t.Fatal("object 2 not held")
	}
	c.add("5", objs[5])
	for key, want := range map[string]bool{"0": false, "1": false, "2": true, "3": false, "4": true, "5": true} {
		if _, _, hit := c.lookup(key); hit != want {
			t.Errorf("object %s held %v, want %v", key, hit, want)
		}
	}
	// An object larger than the limit alone is kept while it is the one
	// in use, and dropped by the next.
	c.SetLimit(per / 2)
	if c.Len() != 0 {
		t.Errorf("after a limit below every object, %d held", c.Len())
	}
	c.add("6", objs[6])
	if c.Len() != 1 {
		t.Errorf("the object in use was dropped")
	}
	c.add("7", objs[7])
	if _, _, hit := c.lookup("6"); hit {
		t.Error("object 6 still held")
	}
	// Objects grow as they are read: a use checks the limit again.
	c.SetLimit(DefaultCacheBytes)
	if held, _ := c.Bytes(); held != objs[7].Bytes() {
		t.Errorf("cache counts %d bytes, its one object %d", held, objs[7].Bytes())
	}
}

// Build-id sharing: a second path to the same build-id is the same object,
// held once and dropped with all its keys.
func TestCacheBuildIDKeys(t *testing.T) {
	o := sizedObject(t, 0, 1024)
	o.BuildID = "abcd"
	c := NewCache()
	c.add("a", o)
	other := sizedObject(t, 1, 1024)
	other.BuildID = "abcd"
	if got := c.add("b", other); got != o {
		t.Fatal("same build-id: a second object held")
	}
	if c.Len() != 1 {
		t.Fatalf("Len %d, want 1", c.Len())
	}
	c.SetLimit(1)
	c.add("c", sizedObject(t, 2, 1024))
	for _, k := range []string{"a", "b"} {
		if _, _, hit := c.lookup(k); hit {
			t.Errorf("key %s still held", k)
		}
	}
	if _, ok := c.byBuild["abcd"]; ok {
		t.Error("build-id still held")
	}
}

// ReadLibcAhead reads the C library's symbols on another goroutine: they
// are there without a lookup asking; its debug information is left
// unread, with lines or without.
func TestReadLibcAhead(t *testing.T) {
	for _, lines := range []bool{true, false} {
		t.Run(fmt.Sprintf("lines=%v", lines), func(t *testing.T) { testReadLibcAhead(t, lines) })
	}
}

func testReadLibcAhead(t *testing.T, lines bool) {
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	c := NewCache()
	var p *Process
	var libc procfs.Mapping
	// Until ld.so has mapped the C library into sleep.
	for deadline := time.Now().Add(10 * time.Second); libc.Path == ""; time.Sleep(5 * time.Millisecond) {
		var err error
		if p, err = c.OpenProcess(cmd.Process.Pid, lines); err == nil {
			for _, m := range p.Mappings() {
				if strings.HasPrefix(filepath.Base(m.Path), "libc.so") && m.Exec() {
					libc = m
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep maps no libc.so: %v", err)
		}
	}
	p.ReadLibcAhead()
	// The goroutine holds the mapping's resolution and the object's
	// reads: once they are done, the object holds its tables.
	o := func() *Object { return c.objectOf(libc.Path) }
	for deadline := time.Now().Add(20 * time.Second); o() == nil || o().Bytes() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("libc was not read ahead")
		}
	}
	if o().linesRead.Load() {
		t.Error("libc's debug information was read")
	}
}

// objectOf returns the cached object of path, nil when none.
func (c *Cache) objectOf(path string) *Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if o := e.Value.(*cached).o; o.Path == path {
			return o
		}
	}
	return nil
}
