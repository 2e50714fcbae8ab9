package python

// Lazy is a process's Reader opened at its first use: a process that is
// not Python, or runs an interpreter that cannot be read, is not tried
// again. The zero value is ready; it is not safe for concurrent use.
type Lazy struct {
	r    *Reader
	none bool
}

// Reader returns pid's Reader, opened at the first call; nil when pid is
// not read as Python.
func (l *Lazy) Reader(pid int) *Reader {
	if l.r == nil && !l.none {
		r, err := Open(pid)
		l.r, l.none = r, err != nil
	}
	return l.r
}

// GiveUp stops reading: from now on Reader returns nil.
func (l *Lazy) GiveUp() { l.r, l.none = nil, true }
