// Package protodump reads the .stacktrace files DLRover's xpu_timer writes:
// one serialized proto3 message xpu_timer.server.Stacktrace (no framing),
// holding gdb's native stacks and py-spy's Python stacks of one rank. The
// viewer merges them with ours, so a site moving from xpu_timer keeps its
// old dumps.
//
// The message, as xpu_timer's hosting_service.proto declares it:
//
//	Stacktrace        1 stacktrace repeated PstackStacktrace, 2 py_stacktrace repeated PySpyStacktrace,
//	                  3 pid int32, 4 rank int32, 5-8 pstack/pyspy stdout/stderr strings,
//	                  9 device_stacktrace, 10 device_status (ignored), 11 process_state string
//	PstackStacktrace  1 pid uint32 (the LWP), 2 thread_name string, 3 frames repeated PstackFrame
//	PstackFrame       1 func_name, 2 file_name ("from LIB" or "at FILE:LINE" part; "??"), 3 origin
//	PySpyStacktrace   1 pid uint32, 2 thread_id uint64, 3 thread_name, 4 os_thread_id uint32,
//	                  5 active bool, 6 owns_gil bool, 7 frames repeated PySpyFrame
//	PySpyFrame        1 func_name, 2 file_name ("FILE:LINE"), 3 module
//
// Frames are innermost first in both lists, as in our files. The reader
// walks the wire format with protowire (no generated code, no descriptor);
// it skips fields it does not know and rejects anything malformed.
package protodump

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// Schema is the Schema of the files Parse returns.
const Schema = "xpu_timer.server.Stacktrace (protobuf)"

// ErrMalformed means the bytes are not a well-formed Stacktrace message.
var ErrMalformed = errors.New("malformed xpu_timer protobuf")

// Likely reports whether data starts like a Stacktrace message: with the
// tag of one of its fields, in the wire type the message declares.
func Likely(data []byte) bool {
	if len(data) == 0 {
		return false
	}
	switch data[0] {
	case 0x0a, 0x12, 0x18, 0x20, 0x2a, 0x32, 0x3a, 0x42, 0x4a, 0x52, 0x5a:
		return true
	}
	return false
}

// Parse decodes one xpu_timer file of rank's dump in a job of world ranks
// (world comes from the file name: the message does not hold it).
func Parse(data []byte, world int) (*dumpfile.File, error) {
	f := &dumpfile.File{Schema: Schema, WorldSize: world, Reason: "hang", Threads: []stack.Thread{}}
	var native, python []stack.Thread
	var errs []string
	err := fields(data, func(num int, v value) error {
		switch num {
		case 1:
			t, err := pstack(v.bytes)
			native = append(native, t)
			return err
		case 2:
			t, err := pyspy(v.bytes)
			python = append(python, t)
			return err
		case 3:
			f.PID = int(int32(v.num))
		case 4:
			f.Rank = int(int32(v.num))
		case 5, 6, 7, 8: // raw tool output, set when xpu_timer could not parse it
			if s := strings.TrimSpace(string(v.bytes)); s != "" {
				tool := map[int]string{5: "gdb stdout", 6: "gdb stderr", 7: "py-spy stdout", 8: "py-spy stderr"}[num]
				errs = append(errs, fmt.Sprintf("%s: %s", tool, clip(s)))
			}
		case 11:
			f.State = string(v.bytes)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f.Errors = errs
	if f.Rank < 0 || f.Rank >= world {
		return nil, fmt.Errorf("%w: rank %d outside world size %d", ErrMalformed, f.Rank, world)
	}
	f.LocalRank, f.LocalWorldSize = f.Rank, world
	f.Threads = join(native, python)
	return f, nil
}

// join pairs gdb's and py-spy's view of each thread by its LWP.
func join(native, python []stack.Thread) []stack.Thread {
	byTID := map[int]int{}
	out := make([]stack.Thread, 0, len(native)+len(python))
	for _, t := range native {
		byTID[t.TID] = len(out)
		out = append(out, t)
	}
	for _, p := range python {
		i, ok := byTID[p.TID]
		if !ok || p.TID == 0 {
			out = append(out, p)
			continue
		}
		t := &out[i]
		t.Python, t.GIL = p.Python, p.GIL
		if p.Name != "" {
			t.Name = p.Name
		}
		t.Merged = stack.Merge(t.Native, t.Python)
	}
	slices.SortStableFunc(out, func(a, b stack.Thread) int { return a.TID - b.TID })
	return out
}

// pstack decodes a PstackStacktrace: gdb's view of one thread.
func pstack(data []byte) (stack.Thread, error) {
	var t stack.Thread
	err := fields(data, func(num int, v value) error {
		switch num {
		case 1:
			t.TID = int(uint32(v.num))
		case 2:
			t.Name = gdbThreadName(string(v.bytes))
		case 3:
			var fr stack.Frame
			err := fields(v.bytes, func(num int, v value) error {
				switch num {
				case 1:
					fr.Func = string(v.bytes)
				case 2:
					fr.File, fr.Line, fr.Module = place(string(v.bytes))
				}
				return nil
			})
			if fr.Func == "" {
				fr.Func = "??"
			}
			t.Native = append(t.Native, fr)
			return err
		}
		return nil
	})
	return t, err
}

// pyspy decodes a PySpyStacktrace: py-spy's view of one Python thread.
func pyspy(data []byte) (stack.Thread, error) {
	var t stack.Thread
	err := fields(data, func(num int, v value) error {
		switch num {
		case 3:
			t.Name = string(v.bytes)
		case 4:
			t.TID = int(uint32(v.num))
		case 6:
			t.GIL = v.num != 0
		case 7:
			fr := stack.Frame{Module: "python"}
			err := fields(v.bytes, func(num int, v value) error {
				switch num {
				case 1:
					fr.Func = string(v.bytes)
				case 2:
					fr.File, fr.Line, _ = place(string(v.bytes))
				}
				return nil
			})
			if fr.Func == "" {
				fr.Func = "??"
			}
			t.Python = append(t.Python, fr)
			return err
		}
		return nil
	})
	return t, err
}

// place splits gdb's or py-spy's location: "at x.cc:12" or "x.py:12" is a
// source position, "from /lib/libc.so.6" or a path a module, "??" nothing.
func place(s string) (file string, line int, module string) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "at "), "from ")
	if s == "" || s == "??" {
		return "", 0, ""
	}
	if i := strings.LastIndexByte(s, ':'); i > 0 {
		if n, err := strconv.Atoi(s[i+1:]); err == nil && n > 0 {
			return s[:i], n, ""
		}
	}
	return "", 0, s
}

// gdbThreadName takes the name out of gdb's thread line, `Thread 0x7f…
// (LWP 123) "pt_main_thread"`; "" when it has none.
func gdbThreadName(s string) string {
	i := strings.IndexByte(s, '"')
	j := strings.LastIndexByte(s, '"')
	if i >= 0 && j > i {
		return s[i+1 : j]
	}
	return ""
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
