package dumpfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xpu-timer/xpu-timer/internal/atomicfile"
)

// Ext is the file name extension of a dump; TextExt that of its readable twin.
const (
	Ext     = ".stacktrace"
	TextExt = ".txt"
)

// Errors Read returns, wrapped with the file's path; test with errors.Is.
var (
	ErrEmpty     = errors.New("empty stack file")
	ErrTruncated = errors.New("truncated stack file")
	ErrCorrupt   = errors.New("corrupt stack file")
	ErrForeign   = errors.New("not an xpu-timer stack file")
)

// schemaPrefix is what every readable Schema value starts with.
const schemaPrefix = "xpu-timer.stacktrace/1."

// Name is the file name of rank's dump in a job of world ranks:
// "00003-00008.stacktrace", five digits each, zero padded.
func Name(rank, world int) string {
	return fmt.Sprintf("%05d-%05d%s", rank, world, Ext)
}

// ParseName reads rank and world size back from a name Name made (a
// directory part is ignored). ok is false for any other name.
func ParseName(name string) (rank, world int, ok bool) {
	base, found := strings.CutSuffix(filepath.Base(name), Ext)
	if !found {
		return 0, 0, false
	}
	r, w, found := strings.Cut(base, "-")
	if !found || len(r) < 5 || len(w) < 5 {
		return 0, 0, false
	}
	var err error
	if rank, err = strconv.Atoi(r); err != nil || rank < 0 || r[0] == '+' {
		return 0, 0, false
	}
	if world, err = strconv.Atoi(w); err != nil || world <= 0 || w[0] == '+' {
		return 0, 0, false
	}
	if rank >= world {
		return 0, 0, false
	}
	return rank, world, true
}

// Write stores f in dir as Name(f.Rank, f.WorldSize), atomically: it writes a
// temporary file in dir, syncs it and renames it into place, so a reader
// never sees half a dump. The readable rendering (Text) goes beside it with
// the same base name and TextExt, written the same way. An empty f.Schema is
// set to Schema.
func Write(dir string, f *File) (string, error) {
	if f.WorldSize <= 0 || f.Rank < 0 || f.Rank >= f.WorldSize {
		return "", fmt.Errorf("write dump: rank %d of world size %d: %w", f.Rank, f.WorldSize, ErrCorrupt)
	}
	if f.Schema == "" {
		f.Schema = Schema
	}
	// Compact, and without encoding/json's HTML escapes: C++ names keep
	// their < > & readable, and the viewer reads them without unescaping.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return "", fmt.Errorf("encode dump of rank %d: %w", f.Rank, err)
	}
	data := buf.Bytes()
	path := filepath.Join(dir, Name(f.Rank, f.WorldSize))
	if err := atomicfile.Write(path, data); err != nil {
		return "", err
	}
	txt := strings.TrimSuffix(path, Ext) + TextExt
	if err := atomicfile.Write(txt, []byte(Text(f))); err != nil {
		return path, err
	}
	return path, nil
}

// Read loads and validates the dump at path. Errors wrap ErrEmpty,
// ErrTruncated, ErrCorrupt or ErrForeign and name the file.
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse decodes and validates one dump's bytes (see Read).
func Parse(data []byte) (*File, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, ErrEmpty
	}
	f, err := fastParse(data)
	if err == nil {
		if err := checkSchema(&f.Schema); err != nil {
			return nil, err
		}
		if err := validate(f); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return f, nil
	}
	f = new(File)
	if err := json.Unmarshal(data, f); err != nil {
		// A JSON document of another shape fails here too: name it
		// foreign rather than corrupt when its schema says so.
		var head struct {
			Schema *string `json:"schema"`
		}
		if json.Unmarshal(data, &head) == nil {
			if err := checkSchema(head.Schema); err != nil {
				return nil, err
			}
		}
		return nil, classify(err)
	}
	if err := checkSchema(&f.Schema); err != nil {
		return nil, err
	}
	if err := validate(f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return f, nil
}

func checkSchema(s *string) error {
	if s == nil || *s == "" {
		return fmt.Errorf("%w: no schema field", ErrForeign)
	}
	if !strings.HasPrefix(*s, schemaPrefix) {
		return fmt.Errorf("%w: schema %q, want %s*", ErrForeign, clip(*s), schemaPrefix)
	}
	return nil
}

// classify maps a JSON decoding error to ErrTruncated or ErrCorrupt.
func classify(err error) error {
	var syn *json.SyntaxError
	if errors.Is(err, io.ErrUnexpectedEOF) || (errors.As(err, &syn) && strings.Contains(syn.Error(), "unexpected end")) {
		return fmt.Errorf("%w: %w", ErrTruncated, err)
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field == "" {
		// The document is valid JSON but not an object: not ours.
		return fmt.Errorf("%w: %w", ErrForeign, err)
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

func validate(f *File) error {
	switch {
	case f.WorldSize <= 0:
		return fmt.Errorf("world size %d", f.WorldSize)
	case f.Rank < 0 || f.Rank >= f.WorldSize:
		return fmt.Errorf("rank %d outside world size %d", f.Rank, f.WorldSize)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
