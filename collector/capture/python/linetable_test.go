package python

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// decoder picks the line-table decoder of a minor version.
func decoder(minor int) func(tab []byte, first, addr int) int {
	switch {
	case minor <= 9:
		return lineLnotab
	case minor == 10:
		return lineTable310
	}
	return lineTable311
}

// TestLineTablesMatchCPython decodes the line tables of a few hundred code
// objects with our decoders and compares every bytecode offset with the
// line CPython gives it (co_lines(), or dis.findlinestarts on 3.9).
func TestLineTablesMatchCPython(t *testing.T) {
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		out, err := py.command("testdata/lines.py").Output()
		if err != nil {
			t.Fatalf("lines.py: %v", err)
		}
		var codes []struct {
			Name   string   `json:"name"`
			First  int      `json:"first"`
			Table  string   `json:"table"`
			Ranges [][3]int `json:"ranges"`
		}
		if err := json.Unmarshal(out, &codes); err != nil {
			t.Fatal(err)
		}
		minor, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(py.name, "debian-"), ".")[1])
		decode := decoder(minor)
		checked := 0
		for _, c := range codes {
			tab, err := hex.DecodeString(c.Table)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range c.Ranges {
				for addr := r[0]; addr < r[1]; addr += 2 {
					checked++
					if got := decode(tab, c.First, addr); got != r[2] {
						t.Fatalf("%s (first line %d) offset %d: line %d, CPython %d", c.Name, c.First, addr, got, r[2])
					}
				}
			}
		}
		if checked < 1000 {
			t.Errorf("only %d offsets checked", checked)
		}
		t.Logf("%d code objects, %d offsets", len(codes), checked)
	})
}

// FuzzLineTables feeds arbitrary tables to every decoder: they must not
// panic, and must give -1 or a line within the range the deltas allow.
func FuzzLineTables(f *testing.F) {
	f.Add([]byte{0x04, 0x0f, 0x08, 0x01}, 1, 6)                   // 3.9 lnotab
	f.Add([]byte{0x08, 0x00, 0x06, 0x01, 0x02, 0x80}, 10, 14)     // 3.10 with a no-line entry
	f.Add([]byte{0x80, 0x00, 0xd8, 0x04, 0xf0, 0x03, 0x01}, 5, 2) // 3.11 short, no-column
	f.Add([]byte{0xf0, 0x43, 0x01, 0x02, 0x03, 0xf8}, 1, 4)       // 3.11 long form and no-location
	f.Add([]byte{0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1, 0) // runaway varint
	f.Fuzz(func(t *testing.T, tab []byte, first, addr int) {
		if len(tab) > 1<<12 {
			return
		}
		if first < -1<<30 || first > 1<<30 {
			return
		}
		for minor := 9; minor <= 11; minor++ {
			// Each entry moves the line by at most 128 (3.9, 3.10) or by
			// one varint of at most 30 bits (3.11+).
			bound := 128 * len(tab)
			if minor == 11 {
				bound = len(tab) << 30
			}
			got := decoder(minor)(tab, first, addr)
			if got != decoder(minor)(tab, first, addr) {
				t.Fatalf("3.%d: not deterministic", minor)
			}
			if got != -1 && (got-first > bound || first-got > bound) {
				t.Fatalf("3.%d: line %d from first %d and %d table bytes", minor, got, first, len(tab))
			}
		}
	})
}
