package python

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// codeInfo is a code object: its header, read while the target's threads
// are stopped (codeHeader), and its strings and line table, decoded once
// they go on (decode): they belong to the code object and never change.
type codeInfo struct {
	refs    [4]uint64 // filename, name, linetable pointers and first line: revalidate a cached entry
	decoded bool      // name, file and table are read
	name    string    // co_name: the bare name on every version, as faulthandler and py-spy print it
	file    string    // co_filename
	first   int       // co_firstlineno
	table   []byte    // co_lnotab (3.9) or co_linetable
}

const (
	maxCodeCache = 1 << 14
	maxString    = 1 << 16
	maxTable     = 1 << 22
)

// codeHeader reads the header of the code object at addr: one read, made
// while the threads are stopped. Code objects are cached across calls;
// each use rereads the header and reuses the cache only when its name,
// file and table pointers are unchanged. A new one is decoded later.
func (r *Reader) codeHeader(addr uint64) (*codeInfo, error) {
	if ci, ok := r.checked[addr]; ok {
		return ci, nil // already (re)validated during this walk
	}
	l := r.l
	nameOff := l.codeName // not co_qualname (3.11+): one key per frame on every version
	size := max(l.codeFilename, nameOff, l.codeLinetable, l.codeFirstLineno) + 8
	b, err := r.read(addr, size)
	if err != nil {
		return nil, err
	}
	if t := r.types["PyCode_Type"]; t != 0 && word(b, l.objectType) != t {
		return nil, fmt.Errorf("code %#x is no code object: %w", addr, errInconsistent)
	}
	refs := [4]uint64{word(b, l.codeFilename), word(b, nameOff), word(b, l.codeLinetable),
		uint64(binary.LittleEndian.Uint32(b[l.codeFirstLineno:]))}
	if ci, ok := r.codes[addr]; ok && ci.refs == refs {
		r.checked[addr] = ci
		return ci, nil
	}
	ci := &codeInfo{refs: refs, first: int(int32(refs[3]))}
	if len(r.codes) >= maxCodeCache {
		clear(r.codes)
	}
	r.codes[addr] = ci
	r.checked[addr] = ci
	return ci, nil
}

// decode reads the strings and the line table of a code object whose
// header codeHeader read; one that fails leaves the cache.
func (r *Reader) decode(addr uint64, ci *codeInfo) error {
	if ci.decoded {
		return nil
	}
	var err error
	defer func() {
		if err != nil && r.codes[addr] == ci {
			delete(r.codes, addr)
		}
	}()
	if ci.file, err = r.unicode(ci.refs[0]); err != nil {
		return fmt.Errorf("co_filename of %#x: %w", addr, err)
	}
	if ci.name, err = r.unicode(ci.refs[1]); err != nil {
		return fmt.Errorf("co_name of %#x: %w", addr, err)
	}
	if ci.table, err = r.bytes(ci.refs[2]); err != nil {
		return fmt.Errorf("line table of %#x: %w", addr, err)
	}
	ci.decoded = true
	return nil
}

// unicode decodes a compact str object: ASCII data follows PyASCIIObject,
// other kinds (1, 2 or 4 bytes a character) follow PyCompactUnicodeObject.
func (r *Reader) unicode(addr uint64) (string, error) {
	l := r.l
	// One read usually covers header and data.
	const guess = 160
	b := make([]byte, l.compactSize+guess)
	n, err := r.mem.readPartial(addr, b)
	if err != nil {
		return "", err
	}
	if int64(n) < l.compactSize {
		return "", fmt.Errorf("str %#x: short read: %w", addr, errInconsistent)
	}
	b = b[:n]
	if t := r.types["PyUnicode_Type"]; t != 0 && word(b, l.objectType) != t {
		return "", fmt.Errorf("str %#x is no str: %w", addr, errInconsistent)
	}
	length := int64(word(b, l.unicodeLen))
	state := binary.LittleEndian.Uint32(b[l.unicodeState:])
	kind, compact, ascii := int64(state>>2&7), state>>5&1 == 1, state>>6&1 == 1
	if !compact || length < 0 || length > maxString || (kind != 1 && kind != 2 && kind != 4) {
		return "", fmt.Errorf("str %#x: state %#x length %d: %w", addr, state, length, errInconsistent)
	}
	start := l.compactSize
	if ascii {
		start = l.asciiSize
	}
	need := start + length*kind
	if int64(len(b)) < need {
		b = make([]byte, need)
		if err := r.mem.read(addr, b); err != nil {
			return "", err
		}
	}
	return decodeUnicode(b[start:need], kind), nil
}

// decodeUnicode turns CPython's fixed-width string data into UTF-8.
func decodeUnicode(data []byte, kind int64) string {
	switch kind {
	case 1:
		// Latin-1: ASCII is the common case and already UTF-8.
		if isASCII(data) {
			return string(data)
		}
		out := make([]byte, 0, len(data)*2)
		for _, c := range data {
			out = utf8.AppendRune(out, rune(c))
		}
		return string(out)
	case 2:
		u := make([]uint16, len(data)/2)
		for i := range u {
			u[i] = binary.LittleEndian.Uint16(data[2*i:])
		}
		return string(utf16.Decode(u)) // UCS-2 holds no surrogate pairs; lone ones become U+FFFD
	default:
		out := make([]byte, 0, len(data))
		for i := 0; i+4 <= len(data); i += 4 {
			out = utf8.AppendRune(out, rune(binary.LittleEndian.Uint32(data[i:])))
		}
		return string(out)
	}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// bytes reads a bytes object's data.
func (r *Reader) bytes(addr uint64) ([]byte, error) {
	l := r.l
	b, err := r.read(addr, l.bytesData)
	if err != nil {
		return nil, err
	}
	if t := r.types["PyBytes_Type"]; t != 0 && word(b, l.objectType) != t {
		return nil, fmt.Errorf("bytes %#x is no bytes: %w", addr, errInconsistent)
	}
	n := int64(word(b, l.bytesSize))
	if n < 0 || n > maxTable {
		return nil, fmt.Errorf("bytes %#x: size %d: %w", addr, n, errInconsistent)
	}
	data := make([]byte, n)
	return data, r.mem.read(addr+uint64(l.bytesData), data)
}
