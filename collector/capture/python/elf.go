package python

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// image is what the reader needs from the ELF file holding the interpreter
// (the executable or libpython), before relocation.
type image struct {
	runtime  uint64 // _PyRuntime
	version  uint64 // Py_Version (3.11+), 0 when absent
	types    map[string]uint64
	minLoad  uint64 // lowest PT_LOAD virtual address, page aligned
	pie      bool   // ET_DYN: addresses move by the load bias
	rodataV  string // version string found in .rodata (3.9/3.10), "" if none
	buffer   uint64 // Py_GetVersion's static buffer "version.0" (3.9/3.10), 0 if unknown
	nameVers string // "3.11" from the file name, "" if none
}

// typeSymbols are the type objects used to validate what is read.
var typeSymbols = []string{"PyCode_Type", "PyUnicode_Type", "PyBytes_Type", "PyFrame_Type"}

var (
	imageMu    sync.Mutex
	imageCache = map[string]*image{} // by path, device and inode
)

// nameVersion returns the version a file name gives ("3.11" of
// libpython3.11.so.1.0), as the regular expression python3\.\d+ would
// find it; "" when there is none.
func nameVersion(name string) string {
	for off := 0; ; {
		i := strings.Index(name[off:], "python3.")
		if i < 0 {
			return ""
		}
		i += off + len("python")
		j := i + len("3.")
		for j < len(name) && name[j] >= '0' && name[j] <= '9' {
			j++
		}
		if j > i+len("3.") {
			return name[i:j]
		}
		off = i
	}
}

// loadImage parses the symbols the reader needs from path, or returns nil
// when the file holds no _PyRuntime. Results are cached by file identity.
func loadImage(path, name, key string) (*image, error) {
	imageMu.Lock()
	im, ok := imageCache[key]
	imageMu.Unlock()
	if ok {
		return im, nil
	}
	im, err := parseImage(path, name)
	if err != nil {
		return nil, err
	}
	imageMu.Lock()
	imageCache[key] = im
	imageMu.Unlock()
	return im, nil
}

// parseImage reads the file at path; name is its path in the process,
// whose base name may carry the version ("libpython3.9.so.1.0").
func parseImage(path, name string) (*image, error) {
	f, err := elfcheck.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	return imageOf(f.File, name)
}

// imageOf reads what the reader needs from f, a file checked by elfcheck;
// name is its path in the process.
func imageOf(f *elf.File, name string) (*image, error) {
	syms := map[string]uint64{}
	want := map[string]bool{"_PyRuntime": true, "Py_Version": true}
	for _, s := range typeSymbols {
		want[s] = true
	}
	collect := func(list []elf.Symbol) {
		for _, s := range list {
			if want[s.Name] && s.Value != 0 {
				if _, dup := syms[s.Name]; !dup {
					syms[s.Name] = s.Value
				}
			}
		}
	}
	dyn, _ := elfcheck.Symbols(f, elf.SHT_DYNSYM)
	collect(dyn)
	// .symtab is slow to parse: only when .dynsym lacks _PyRuntime.
	if syms["_PyRuntime"] == 0 {
		list, _ := elfcheck.Symbols(f, elf.SHT_SYMTAB)
		collect(list)
	}
	if syms["_PyRuntime"] == 0 {
		return nil, nil
	}
	im := &image{runtime: syms["_PyRuntime"], types: map[string]uint64{}, pie: f.Type == elf.ET_DYN}
	for _, s := range typeSymbols {
		im.types[s] = syms[s]
	}
	im.minLoad = ^uint64(0)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr < im.minLoad {
			im.minLoad = p.Vaddr &^ 0xfff
		}
	}
	im.nameVers = nameVersion(filepath.Base(name))
	if v := syms["Py_Version"]; v != 0 {
		im.version = readUint64At(f, v)
	}
	if im.version == 0 && im.nameVers != "" {
		if im.rodataV = rodataVersion(f, im.nameVers); im.rodataV == "" {
			// Py_GetVersion's static buffer, a local symbol.
			list, _ := elfcheck.Symbols(f, elf.SHT_SYMTAB)
			for _, s := range list {
				if s.Name == "version.0" {
					im.buffer = s.Value
				}
			}
		}
	}
	return im, nil
}

// readUint64At reads a little-endian word at virtual address addr from the
// file's sections.
func readUint64At(f *elf.File, addr uint64) uint64 {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.ReaderAt == nil || addr < s.Addr || addr-s.Addr > s.Size || s.Size-(addr-s.Addr) < 8 {
			continue // a compressed section has no ReaderAt
		}
		b := make([]byte, 8)
		if _, err := s.ReadAt(b, int64(addr-s.Addr)); err != nil {
			return 0
		}
		return le64(b)
	}
	return 0
}

// rodataVersion finds the PY_VERSION string ("3.9.18") in .rodata: a NUL
// terminated string of the major.minor the file name gave, possibly the
// tail of a longer string the linker merged it into ("/x/3.9.18").
func rodataVersion(f *elf.File, majorMinor string) string {
	s := f.Section(".rodata")
	if s == nil {
		return ""
	}
	data, err := elfcheck.Data(s)
	if err != nil {
		return ""
	}
	prefix := []byte(majorMinor + ".")
	for off := 0; ; {
		i := bytes.Index(data[off:], prefix)
		if i < 0 {
			return ""
		}
		i += off
		off = i + 1
		if i > 0 && (data[i-1] == '.' || data[i-1] >= '0' && data[i-1] <= '9') {
			continue
		}
		end := bytes.IndexByte(data[i:], 0)
		if end < 0 || end > 16 {
			continue
		}
		if v := data[i : i+end]; len(versionPrefix(v)) == len(v) {
			return string(v)
		}
	}
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// located is an interpreter image found in a process, with its load bias.
type located struct {
	*image
	path string
	bias uint64
}

// locate finds the file mapped into pid (its mappings maps) that defines
// _PyRuntime: libpython when loaded, else the executable.
func locate(pid int, maps []procfs.Mapping) (*located, error) {
	exe, _ := os.Readlink(filepath.Join(procfs.Root, strconv.Itoa(pid), "exe"))
	exe = string(bytes.TrimSuffix([]byte(exe), []byte(" (deleted)")))
	// Only a file with code mapped is loaded: a process that maps an
	// interpreter's file to read it (a symbol cache, this monitor itself)
	// is not running it.
	loaded := map[string]bool{}
	for _, m := range maps {
		if m.Exec() {
			loaded[m.Path] = true
		}
	}
	seen := map[string]bool{}
	var candidates []procfs.Mapping
	for _, m := range maps {
		if m.Path == "" || m.Path[0] != '/' || seen[m.Path] || !loaded[m.Path] {
			continue
		}
		// The executable is the interpreter, except where a loader runs
		// it (ld-linux-x86-64.so.2 --library-path DIR python3.14): then
		// it is mapped under its own name.
		base := filepath.Base(m.Path)
		if m.Path == exe || strings.HasPrefix(base, "libpython") || strings.HasPrefix(base, "python") {
			seen[m.Path] = true
			candidates = append(candidates, m)
		}
	}
	// libpython first: a shared build's executable only calls into it.
	for pass := 0; pass < 2; pass++ {
		for _, m := range candidates {
			isLib := strings.HasPrefix(filepath.Base(m.Path), "libpython")
			if (pass == 0) != isLib {
				continue
			}
			p := mappedFile(pid, m)
			im, err := loadImage(p, m.Path, fmt.Sprintf("%s:%s:%d", m.Path, m.Dev, m.Inode))
			if err != nil || im == nil {
				continue
			}
			l := &located{image: im, path: m.Path}
			if im.pie {
				first, ok := firstMapping(maps, m.Path)
				if !ok {
					continue
				}
				l.bias = first.Start - first.Offset - im.minLoad
			}
			return l, nil
		}
	}
	return nil, fmt.Errorf("find _PyRuntime in process %d: %w", pid, ErrNotPython)
}

// firstMapping is the lowest mapping of path.
func firstMapping(maps []procfs.Mapping, path string) (procfs.Mapping, bool) {
	for _, m := range maps {
		if m.Path == path {
			return m, true
		}
	}
	return procfs.Mapping{}, false
}

// mappedFile names the file behind a mapping the way that survives
// containers and replaced files: /proc/PID/map_files (the mapped inode
// itself), else the path under the process's root, else the path as is.
func mappedFile(pid int, m procfs.Mapping) string {
	proc := filepath.Join(procfs.Root, strconv.Itoa(pid))
	for _, p := range []string{
		filepath.Join(proc, "map_files", fmt.Sprintf("%x-%x", m.Start, m.End)),
		filepath.Join(proc, "root", m.Path),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return m.Path
}
