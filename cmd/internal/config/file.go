package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrSyntax marks a malformed line in a config file.
var ErrSyntax = errors.New("config syntax")

// maxFileBytes bounds a config file; ours are a few lines.
const maxFileBytes = 1 << 20

// ReadFile reads an INI-style file of KEY=VALUE lines.
func ReadFile(name string) (map[string]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("read %s: larger than %d bytes", name, maxFileBytes)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// Parse reads KEY=VALUE lines. Blank lines, lines starting with # or ; and
// [section] headers are ignored; an optional "export " prefix is allowed;
// spaces around key and value are trimmed and one pair of matching quotes
// around the value is removed. A later line for a key wins.
func Parse(data []byte) (map[string]string, error) {
	m := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("line %d: unterminated section header: %w", n, ErrSyntax)
			}
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok {
			return nil, fmt.Errorf("line %d: no '=' in %q: %w", n, clip(line), ErrSyntax)
		}
		if !validKey(key) {
			return nil, fmt.Errorf("line %d: bad key %q: %w", n, clip(key), ErrSyntax)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		m[key] = value
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	return m, nil
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
