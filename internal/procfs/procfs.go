// Package procfs reads what the tools need from /proc: memory maps,
// environment, process and thread state, thread names and children.
package procfs

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// ErrNoProcess reports that the process (or thread) does not exist (any more).
var ErrNoProcess = errors.New("no such process")

// Root is the proc mount; tests may point it elsewhere.
var Root = "/proc"

func path(pid int, elem ...string) string {
	return filepath.Join(append([]string{Root, strconv.Itoa(pid)}, elem...)...)
}

func read(p string) ([]byte, error) {
	b, err := rawfile.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errESRCH) {
		return nil, fmt.Errorf("read %s: %w", p, ErrNoProcess)
	}
	return b, err
}

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp"
	Offset     uint64
	Dev        string // "fd:01"
	Inode      uint64
	Path       string // file path, "[vdso]", "[stack]", or "" for anonymous memory
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// Contains reports whether addr falls inside the mapping.
func (m Mapping) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// Maps reads /proc/PID/maps, sorted by start address.
func Maps(pid int) ([]Mapping, error) {
	b, err := read(path(pid, "maps"))
	if err != nil {
		return nil, err
	}
	return ParseMaps(b)
}

// ParseMaps parses the text of a maps file. A torch rank's is 200 KB,
// 1,700 lines, read at each dump: a line is cut by hand and its strings
// (the same few permissions and devices, a library's path on each of its
// mappings) are shared, so that parsing costs a slice and a string per
// distinct path. A line the fast way does not take (not ASCII, odd
// whitespace, a malformed number) is parsed by parseMapsLine, the
// reference.
func ParseMaps(b []byte) ([]Mapping, error) {
	out := make([]Mapping, 0, bytes.Count(b, []byte{'\n'})+1)
	strs := map[string]string{}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'}) // as bufio.ScanLines
		if len(line) > maxMapsLine {
			return nil, bufio.ErrTooLong
		}
		if len(line) == 0 {
			continue
		}
		m, ok := parseMapsLineFast(line, strs)
		if !ok {
			var err error
			if m, err = parseMapsLine(string(line)); err != nil {
				return nil, err
			}
		}
		out = append(out, m)
	}
	slices.SortStableFunc(out, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	return out, nil
}

// maxMapsLine bounds a line of a maps file (a path is at most 4 KB).
const maxMapsLine = 1 << 20

// parseMapsLineFast parses a well-formed ASCII line the way parseMapsLine
// does, sharing strings through strs; false for any other line.
func parseMapsLineFast(line []byte, strs map[string]string) (Mapping, bool) {
	i := 0
	blank := func() {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
	}
	var f [5][]byte
	for k := range f {
		blank()
		j := i
		for i < len(line) && line[i] != ' ' && line[i] != '\t' {
			i++
		}
		if f[k] = line[j:i]; i == j {
			return Mapping{}, false
		}
	}
	blank()
	path := line[i:]
	// Numbers are checked as parsed; the rest must hold no byte that
	// strings.Fields would take for a space (or a part of one).
	for _, b := range [][]byte{f[1], f[3], path} {
		for _, c := range b {
			if c >= 0x80 || c == '\v' || c == '\f' || c == '\r' {
				return Mapping{}, false
			}
		}
	}
	dash := bytes.IndexByte(f[0], '-')
	if dash < 0 {
		return Mapping{}, false
	}
	var m Mapping
	var ok [4]bool
	m.Start, ok[0] = parseBase(f[0][:dash], 16)
	m.End, ok[1] = parseBase(f[0][dash+1:], 16)
	m.Offset, ok[2] = parseBase(f[2], 16)
	m.Inode, ok[3] = parseBase(f[4], 10)
	if ok != [4]bool{true, true, true, true} || m.End < m.Start {
		return Mapping{}, false
	}
	shared := func(b []byte) string {
		if s, ok := strs[string(b)]; ok {
			return s
		}
		s := string(b)
		strs[s] = s
		return s
	}
	m.Perms, m.Dev = shared(f[1]), shared(f[3])
	if len(path) > 0 {
		m.Path = shared(bytes.TrimSuffix(path, []byte(" (deleted)")))
	}
	return m, true
}

// parseBase parses digits of base 10 or 16, as strconv.ParseUint would
// without error; false for anything else (an empty field, another
// character, a value over 64 bits).
func parseBase(b []byte, base uint64) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if v > (math.MaxUint64-d)/base {
			return 0, false
		}
		v = v*base + d
	}
	return v, true
}

// parseMapsLine parses one line of a maps file: start-end perms offset
// dev inode [path].
func parseMapsLine(line string) (Mapping, error) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return Mapping{}, fmt.Errorf("parse maps line %q: too few fields", line)
	}
	se := strings.SplitN(f[0], "-", 2)
	if len(se) != 2 {
		return Mapping{}, fmt.Errorf("parse maps line %q: bad range", line)
	}
	var m Mapping
	var err error
	if m.Start, err = strconv.ParseUint(se[0], 16, 64); err != nil {
		return Mapping{}, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	if m.End, err = strconv.ParseUint(se[1], 16, 64); err != nil {
		return Mapping{}, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	m.Perms = f[1]
	if m.Offset, err = strconv.ParseUint(f[2], 16, 64); err != nil {
		return Mapping{}, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	m.Dev = f[3]
	if m.Inode, err = strconv.ParseUint(f[4], 10, 64); err != nil {
		return Mapping{}, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	if m.End < m.Start {
		return Mapping{}, fmt.Errorf("parse maps line %q: range ends before it starts", line)
	}
	if len(f) > 5 {
		// The path is everything after the inode field, spaces included.
		m.Path = strings.TrimSuffix(afterFields(line, 5), " (deleted)")
	}
	return m, nil
}

// afterFields returns what follows the first n whitespace-separated fields
// of line, leading whitespace dropped.
func afterFields(line string, n int) string {
	rest := line
	for range n {
		rest = strings.TrimLeft(rest, " \t")
		i := strings.IndexAny(rest, " \t")
		if i < 0 {
			return ""
		}
		rest = rest[i:]
	}
	return strings.TrimLeft(rest, " \t")
}

// Environ reads /proc/PID/environ into a map.
func Environ(pid int) (map[string]string, error) {
	b, err := read(path(pid, "environ"))
	if err != nil {
		return nil, err
	}
	return ParseEnviron(b), nil
}

// ParseEnviron parses the NUL-separated KEY=VALUE strings of an environ
// file; a later string for a key wins, one without '=' is skipped.
func ParseEnviron(b []byte) map[string]string {
	env := make(map[string]string)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}

// Cmdline reads /proc/PID/cmdline.
func Cmdline(pid int) ([]string, error) {
	b, err := read(path(pid, "cmdline"))
	if err != nil {
		return nil, err
	}
	return ParseCmdline(b), nil
}

// Exe reads the path of pid's executable (the /proc/PID/exe link).
func Exe(pid int) (string, error) {
	return os.Readlink(path(pid, "exe"))
}

// RunsPython says whether the executable at exe is a Python interpreter
// by its name (python3, python3.11, python3.14t, ...).
func RunsPython(exe string) bool {
	return strings.HasPrefix(filepath.Base(exe), "python")
}

// ParseCmdline splits a cmdline file into its NUL-terminated arguments.
func ParseCmdline(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// Stat is the part of /proc/PID/stat (or /proc/PID/task/TID/stat) we use.
type Stat struct {
	PID   int
	Comm  string
	State byte // R, S, D, Z, T, t, X, I
	PPID  int
	PGID  int
}

// StateName spells a state letter the way /proc/PID/status does.
func StateName(s byte) string {
	switch s {
	case 'R':
		return "R (running)"
	case 'S':
		return "S (sleeping)"
	case 'D':
		return "D (disk sleep)"
	case 'T':
		return "T (stopped)"
	case 't':
		return "t (tracing stop)"
	case 'Z':
		return "Z (zombie)"
	case 'X':
		return "X (dead)"
	case 'I':
		return "I (idle)"
	}
	return string(s) + " (unknown)"
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) { return readStat(path(pid, "stat")) }

// ReadTaskStat reads /proc/PID/task/TID/stat.
func ReadTaskStat(pid, tid int) (Stat, error) {
	return readStat(path(pid, "task", strconv.Itoa(tid), "stat"))
}

func readStat(p string) (Stat, error) {
	b, err := read(p)
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ParseStat parses the text of a stat file. The comm field may hold spaces
// and parentheses, so it is delimited by the first '(' and the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open || closing+2 >= len(b) {
		return Stat{}, fmt.Errorf("parse stat %q: no comm field", b)
	}
	var s Stat
	var err error
	if s.PID, err = strconv.Atoi(strings.TrimSpace(string(b[:open]))); err != nil {
		return Stat{}, fmt.Errorf("parse stat pid: %w", err)
	}
	s.Comm = string(b[open+1 : closing])
	f := strings.Fields(string(b[closing+2:]))
	if len(f) < 4 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("parse stat %q: too few fields", b)
	}
	s.State = f[0][0]
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("parse stat ppid: %w", err)
	}
	if s.PGID, err = strconv.Atoi(f[2]); err != nil {
		return Stat{}, fmt.Errorf("parse stat pgrp: %w", err)
	}
	return s, nil
}

// Tasks lists the thread ids of a process, ascending.
func Tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(path(pid, "task"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errESRCH) {
			return nil, fmt.Errorf("list threads of %d: %w", pid, ErrNoProcess)
		}
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	sort.Ints(tids)
	return tids, nil
}

// ThreadName reads /proc/PID/task/TID/comm.
func ThreadName(pid, tid int) (string, error) {
	b, err := read(path(pid, "task", strconv.Itoa(tid), "comm"))
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// Children lists the direct children of a process, from every thread's
// /proc/PID/task/TID/children.
func Children(pid int) ([]int, error) {
	tids, err := Tasks(pid)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, tid := range tids {
		b, err := rawfile.ReadFile(path(pid, "task", strconv.Itoa(tid), "children"))
		if err != nil {
			continue // thread exited
		}
		for _, c := range ParseChildren(b) {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// ParseChildren parses a children file: process ids separated by spaces.
// What is not a positive process id is skipped.
func ParseChildren(b []byte) []int {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil && c > 0 {
			out = append(out, c)
		}
	}
	return out
}

// Descendants lists every descendant of pid (not pid itself), breadth first.
func Descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		kids, _ := Children(p)
		out = append(out, kids...)
		queue = append(queue, kids...)
	}
	return out
}

// PIDs lists every process id in the proc mount.
func PIDs() ([]int, error) {
	ents, err := os.ReadDir(Root)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out, nil
}
