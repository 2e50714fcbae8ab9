package timeline

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

// Odd is an entry of the timeline directory named as a dump that is not a
// regular file (a link, a directory, a FIFO...): a reader skips it.
type Odd struct {
	Path string
	Mode fs.FileMode // its type bits, as the directory listed them
}

// List returns the paths of the dumps in dir (regular files named
// *.stacktrace, the current incarnations: IncarnationsDir is not read),
// sorted, and the entries named as dumps that are not regular files.
func List(dir string) (dumps []string, odd []Odd, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) != dumpfile.Ext {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if e.Type().IsRegular() {
			dumps = append(dumps, p)
			continue
		}
		odd = append(odd, Odd{Path: p, Mode: e.Type()})
	}
	slices.Sort(dumps)
	return dumps, odd, nil
}
