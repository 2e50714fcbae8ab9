// Package procfs reads what the tools need from /proc: memory maps,
// environment, process and thread state, thread names and children.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// ParseMaps parses the text of a maps file.
func ParseMaps(b []byte) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		// start-end perms offset dev inode [path]
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("parse maps line %q: too few fields", line)
		}
		se := strings.SplitN(f[0], "-", 2)
		if len(se) != 2 {
			return nil, fmt.Errorf("parse maps line %q: bad range", line)
		}
		var m Mapping
		var err error
		if m.Start, err = strconv.ParseUint(se[0], 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		if m.End, err = strconv.ParseUint(se[1], 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		m.Perms = f[1]
		if m.Offset, err = strconv.ParseUint(f[2], 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		m.Dev = f[3]
		if m.Inode, err = strconv.ParseUint(f[4], 10, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		if len(f) > 5 {
			// The path is everything after the inode field, spaces included.
			idx := strings.Index(line, f[5])
			m.Path = strings.TrimSuffix(line[idx:], " (deleted)")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

// Environ reads /proc/PID/environ into a map.
func Environ(pid int) (map[string]string, error) {
	b, err := read(path(pid, "environ"))
	if err != nil {
		return nil, err
	}
	env := make(map[string]string)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

// Cmdline reads /proc/PID/cmdline.
func Cmdline(pid int) ([]string, error) {
	b, err := read(path(pid, "cmdline"))
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
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
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Ints(out)
	return out, nil
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
