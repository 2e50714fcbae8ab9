package viewer

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
)

// loaded is one readable dump, or why its file was skipped.
type loaded struct {
	path  string
	rank  int // from the file name when it has the RRRRR-WWWWW form
	world int // from the file name; 0 when the name has another form
	file  *dumpfile.File
	err   error
}

// list returns the dump files of dir, sorted.
func list(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var paths []string
	for _, e := range ents {
		if e.Type().IsRegular() && filepath.Ext(e.Name()) == dumpfile.Ext {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(paths)
	return paths, nil
}

// load reads paths on every CPU and hands each result to use, one at a time
// and in no particular order. At most a few decoded files are alive at once.
func load(paths []string, workers int, use func(loaded)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	jobs := make(chan string)
	out := make(chan loaded, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range jobs {
				l := loaded{path: p}
				l.rank, l.world, _ = dumpfile.ParseName(p)
				l.file, l.err = dumpfile.Read(p)
				out <- l
			}
		}()
	}
	go func() {
		for _, p := range paths {
			jobs <- p
		}
		close(jobs)
		wg.Wait()
		close(out)
	}()
	for l := range out {
		use(l)
	}
}
