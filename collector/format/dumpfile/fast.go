package dumpfile

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// The thread stacks are nearly all of a dump's bytes, and a job of
// thousands of ranks makes gigabytes of them. fastParse decodes them with a
// scanner made for exactly stack.Thread and stack.Frame, interning the
// names and paths that repeat from frame to frame, and leaves the small
// rest of the file to encoding/json. It accepts a strict subset of JSON
// (no null, no fractions in integers, exact key spelling for known fields):
// on anything else it returns errSlow and Parse decodes the whole file with
// encoding/json, which also words the errors. FuzzFastParse checks both
// ways agree.

var errSlow = errors.New("take the slow path")

// fields holds the JSON fields of stack.Thread and stack.Frame; ok while
// every one is of a kind the scanner decodes: the common ones by name
// below, any other string, bool or integer field through reflection.
// Found on first use, not at every start of a binary that never reads a
// dump file.
var fields = sync.OnceValue(func() (f struct {
	thread, frame map[string]int
	ok            bool
}) {
	var threadOK, frameOK bool
	f.thread, threadOK = jsonFields(reflect.TypeFor[stack.Thread]())
	f.frame, frameOK = jsonFields(reflect.TypeFor[stack.Frame]())
	f.ok = threadOK && frameOK
	return f
})

// jsonFields maps the JSON names of t's fields to their indexes, and says
// whether the scanner can decode them all.
func jsonFields(t reflect.Type) (map[string]int, bool) {
	fields := map[string]int{}
	ok := true
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = i
		switch f.Type.Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			if f.Type != reflect.TypeFor[[]stack.Frame]() {
				ok = false
			}
		}
	}
	return fields, ok
}

// interns are reused string tables: names and paths repeat across the
// frames of a file and across the files of a job.
var interns = sync.Pool{New: func() any { return make(map[string]string) }}

const maxIntern = 1 << 16

type scanner struct {
	b      []byte
	i      int
	intern map[string]string
}

func fastParse(data []byte) (*File, error) {
	if !fields().ok {
		return nil, errSlow
	}
	s := &scanner{b: data, intern: interns.Get().(map[string]string)}
	defer func() {
		if len(s.intern) > maxIntern {
			clear(s.intern)
		}
		interns.Put(s.intern)
	}()
	if !s.next('{') {
		return nil, errSlow
	}
	head := []byte{'{'}
	var threads []stack.Thread
	seen := false
	for first := true; ; first = false {
		if s.next('}') {
			break
		}
		if !first && !s.next(',') {
			return nil, errSlow
		}
		kstart := s.ws()
		key, ok := s.rawString()
		if !ok || !s.next(':') {
			return nil, errSlow
		}
		if key == "threads" {
			if seen {
				return nil, errSlow
			}
			seen = true
			if threads, ok = s.threads(); !ok {
				return nil, errSlow
			}
			continue
		}
		if strings.EqualFold(key, "threads") {
			return nil, errSlow
		}
		vstart := s.ws()
		if !s.skip(0) {
			return nil, errSlow
		}
		if len(head) > 1 {
			head = append(head, ',')
		}
		head = append(head, data[kstart:s.i]...)
		_ = vstart
	}
	if s.ws() != len(data) {
		return nil, errSlow
	}
	head = append(head, '}')
	f := new(File)
	if err := json.Unmarshal(head, f); err != nil {
		return nil, errSlow
	}
	f.Threads = threads
	return f, nil
}

// ws skips white space and returns the offset reached.
func (s *scanner) ws() int {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return s.i
		}
	}
	return s.i
}

// next consumes c after white space, if it is there.
func (s *scanner) next(c byte) bool {
	if s.ws() < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) threads() ([]stack.Thread, bool) {
	if !s.next('[') {
		return nil, false
	}
	out := make([]stack.Thread, 0, 16)
	for first := true; ; first = false {
		if s.next(']') {
			return out, true
		}
		if !first && !s.next(',') {
			return nil, false
		}
		var t stack.Thread
		if !s.object(func(key string) bool {
			var ok bool
			switch key {
			case "tid":
				var n int64
				n, ok = s.int(true)
				t.TID = int(n)
			case "name":
				t.Name, ok = s.str()
			case "state":
				t.State, ok = s.str()
			case "error":
				t.Error, ok = s.str()
			case "gil":
				t.GIL, ok = s.bool()
			case "native":
				t.Native, ok = s.frames()
			case "python":
				t.Python, ok = s.frames()
			case "merged":
				t.Merged, ok = s.frames()
			default:
				return s.other(reflect.ValueOf(&t).Elem(), fields().thread, key)
			}
			return ok
		}) {
			return nil, false
		}
		out = append(out, t)
	}
}

func (s *scanner) frames() ([]stack.Frame, bool) {
	if !s.next('[') {
		return nil, false
	}
	out := make([]stack.Frame, 0, 48)
	for first := true; ; first = false {
		if s.next(']') {
			return out, true
		}
		if !first && !s.next(',') {
			return nil, false
		}
		var f stack.Frame
		if !s.object(func(key string) bool {
			var ok bool
			switch key {
			case "func":
				f.Func, ok = s.str()
			case "file":
				f.File, ok = s.str()
			case "module":
				f.Module, ok = s.str()
			case "line":
				var n int64
				n, ok = s.int(true)
				f.Line = int(n)
			case "addr":
				var n int64
				n, ok = s.int(false)
				f.Addr = uint64(n)
			default:
				return s.other(reflect.ValueOf(&f).Elem(), fields().frame, key)
			}
			return ok
		}) {
			return nil, false
		}
		out = append(out, f)
	}
}

// object walks an object, calling field after each key's colon. Repeated
// keys go the slow way (encoding/json lets the last win, merging arrays).
func (s *scanner) object(field func(key string) bool) bool {
	if !s.next('{') {
		return false
	}
	var seen [8]string
	n := 0
	for first := true; ; first = false {
		if s.next('}') {
			return true
		}
		if !first && !s.next(',') {
			return false
		}
		s.ws()
		key, ok := s.rawString()
		if !ok || !s.next(':') {
			return false
		}
		for _, k := range seen[:n] {
			if k == key {
				return false
			}
		}
		if n < len(seen) {
			seen[n] = key
			n++
		} else {
			return false
		}
		s.ws()
		if !field(key) {
			return false
		}
	}
}

// other decodes a field the switch does not name into v, or skips the
// value of a key v lacks, unless it differs from one of v's only in case
// (encoding/json would match it).
func (s *scanner) other(v reflect.Value, fields map[string]int, key string) bool {
	i, ok := fields[key]
	if !ok {
		for k := range fields {
			if strings.EqualFold(key, k) {
				return false
			}
		}
		return s.skip(0)
	}
	fv := v.Field(i)
	switch fv.Kind() {
	case reflect.String:
		str, ok := s.str()
		fv.SetString(str)
		return ok
	case reflect.Bool:
		b, ok := s.bool()
		fv.SetBool(b)
		return ok
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := s.int(true)
		if !ok || fv.OverflowInt(n) {
			return false
		}
		fv.SetInt(n)
		return true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := s.int(false)
		if !ok || fv.OverflowUint(uint64(n)) {
			return false
		}
		fv.SetUint(uint64(n))
		return true
	}
	return false
}

// rawString reads a string with no escapes and returns it without
// allocating (valid until the buffer changes): for keys.
func (s *scanner) rawString() (string, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		if c == '"' {
			s.i = j + 1
			return unsafeString(s.b[start:j]), true
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return "", false
		}
	}
	return "", false
}

// str reads a string value, interned.
func (s *scanner) str() (string, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start := s.i + 1
	ascii := true
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			raw := s.b[start:j]
			if !ascii && !utf8.Valid(raw) {
				return "", false // encoding/json replaces bad bytes; let it
			}
			if v, ok := s.intern[string(raw)]; ok {
				return v, true
			}
			v := string(raw)
			if len(s.intern) < maxIntern {
				s.intern[v] = v
			}
			return v, true
		case c == '\\':
			return s.escaped(start)
		case c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		}
	}
	return "", false
}

// escaped decodes a string with escapes, from its first byte at start.
func (s *scanner) escaped(start int) (string, bool) {
	var out []byte
	for j := start; j < len(s.b); {
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			if !utf8.Valid(out) {
				return "", false
			}
			if v, ok := s.intern[string(out)]; ok {
				return v, true
			}
			v := string(out)
			if len(s.intern) < maxIntern {
				s.intern[v] = v
			}
			return v, true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(s.b) {
			return "", false
		}
		switch e := s.b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s.b[j+2:])
			if !ok {
				return "", false
			}
			j += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if j+7 < len(s.b) && s.b[j+2] == '\\' && s.b[j+3] == 'u' {
					r2, ok = hex4(s.b[j+4:])
				}
				if !ok || utf16.DecodeRune(r, r2) == utf8.RuneError {
					return "", false // lone surrogates: encoding/json's business
				}
				r = utf16.DecodeRune(r, r2)
				j += 6
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
		j += 2
	}
	return "", false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// int reads a plain integer that fits int64 (signed) or uint64; fractions
// and exponents go the slow way.
func (s *scanner) int(signed bool) (int64, bool) {
	neg := false
	if s.i < len(s.b) && s.b[s.i] == '-' {
		if !signed {
			return 0, false
		}
		neg = true
		s.i++
	}
	start := s.i
	var n uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
		s.i++
	}
	digits := s.i - start
	if digits == 0 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	switch {
	case !signed:
		return int64(n), true
	case neg && n <= 1<<63:
		return -int64(n), true
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

func (s *scanner) bool() (bool, bool) {
	switch {
	case strings.HasPrefix(unsafeString(s.b[s.i:]), "true"):
		s.i += 4
		return true, true
	case strings.HasPrefix(unsafeString(s.b[s.i:]), "false"):
		s.i += 5
		return false, true
	}
	return false, false
}

// skip passes over any JSON value, checking its syntax loosely (the value
// is decoded by encoding/json afterwards, or is ignored as encoding/json
// would ignore it).
func (s *scanner) skip(depth int) bool {
	if depth > 64 || s.ws() >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		s.i++
		for first := true; ; first = false {
			if s.next('}') {
				return true
			}
			if !first && !s.next(',') {
				return false
			}
			s.ws()
			if _, ok := s.str(); !ok || !s.next(':') || !s.skip(depth+1) {
				return false
			}
		}
	case c == '[':
		s.i++
		for first := true; ; first = false {
			if s.next(']') {
				return true
			}
			if !first && !s.next(',') {
				return false
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case c == 't' || c == 'f':
		_, ok := s.bool()
		return ok
	case c == 'n':
		if strings.HasPrefix(unsafeString(s.b[s.i:]), "null") {
			s.i += 4
			return true
		}
		return false
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return false
}

// number passes over a number with JSON's exact grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	digits := func() int {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	s.i = i
	return true
}
