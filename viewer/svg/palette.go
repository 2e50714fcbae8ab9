package svg

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
)

// Palette names the colour family of a frame, after xpu_timer's viewer.
type Palette int

const (
	Red    Palette = iota // everything else
	Green                 // frames matching "/torch" or "nccl"
	Yellow                // C++ frames ("::")
	Aqua                  // CPython sources and Python frames (".py:N")
	Purple                // the State@ frame
)

var (
	pyLine  = regexp.MustCompile(`\.py:\d+`)
	cpython = regexp.MustCompile(`(^|@)_?Py[A-Z_a-z]|libpython|/Python/[a-z_]+\.c|/Objects/[a-zA-Z_]+\.c|/Modules/[a-zA-Z_]+\.c`)
)

// Classify picks the family of a frame from its func@file.
func Classify(frame string) Palette {
	switch {
	case strings.HasPrefix(frame, "State@"):
		return Purple
	case strings.Contains(frame, "/torch") || strings.Contains(frame, "nccl"):
		return Green
	case strings.Contains(frame, "::"):
		return Yellow
	case pyLine.MatchString(frame) || cpython.MatchString(frame):
		return Aqua
	}
	return Red
}

// Color is the fill of a frame: its family's hue, shaded by a hash of the
// name so the same frame has the same colour in every picture.
func Color(frame string) string {
	h := fnv.New32a()
	h.Write([]byte(frame))
	v := h.Sum32()
	a := float64(v&0xff) / 255
	b := float64(v>>8&0xff) / 255
	c := float64(v>>16&0xff) / 255
	var r, g, bl float64
	switch Classify(frame) {
	case Green:
		r, g, bl = 50+60*a, 190+60*b, 50+60*a
	case Yellow:
		r, g, bl = 175+55*a, 175+55*a, 50+20*c
	case Aqua:
		r, g, bl = 50+60*a, 165+55*b, 165+55*b
	case Purple:
		r, g, bl = 190+65*a, 80+60*a, 190+65*a
	default:
		r, g, bl = 205+50*a, 230*b, 55*c
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", int(r), int(g), int(bl))
}
