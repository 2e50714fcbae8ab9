// Package svg draws a merged stack trie as a self-contained interactive
// flame graph in the manner of flamegraph.pl: hover details, click to zoom,
// reset zoom, and regex search with the matched share. Every piece of text
// is escaped, so frame names cannot break the document or inject markup.
package svg

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Options tune a picture.
type Options struct {
	Title    string
	Subtitle string
	Width    int     // picture width in pixels; default: fitted (see Fitted)
	MinWidth float64 // frames narrower than this many pixels are left out; default 0.1
	MaxLabel int     // longest label kept in a frame's details; default 4096 bytes
}

// DefaultWidth is a picture's least width, flamegraph.pl's as xpu_timer
// calls it.
const DefaultWidth = 1600

// A fitted picture gives one unit of width (a stack of one rank, or one
// distinct stack) at least unitWidth pixels, room for "func…@2|0-1/3",
// when that takes at most maxFitted pixels in all.
const (
	unitWidth = 160
	maxFitted = 6400
)

// Fitted is the width of a picture of total units of width: wide enough
// that one unit shows a function's start and its rank sets, at least
// DefaultWidth; DefaultWidth when that would take more than maxFitted
// pixels (a big job: zoom in to read a thin bar).
func Fitted(total int) int {
	w := total*unitWidth + 2*xpad
	if w > maxFitted {
		return DefaultWidth
	}
	return max(DefaultWidth, w)
}

// shortRuns is how many runs of a rank set a frame's label shows; the
// rest is counted, "0/4/8+4093" (see rankset.AppendShort). The folded
// file and the pprof profile keep the sets whole.
const shortRuns = 8

const (
	frameHeight = 16
	fontSize    = 12
	fontWidth   = 0.59 // average glyph width as a share of the font size
	xpad        = 10
	ypadTop     = fontSize*4 + 10
	ypadBottom  = fontSize*2 + 14
)

// Render writes t as an SVG document to w.
func Render(w io.Writer, t *flame.Tree, o Options) error {
	total := t.Root.Value
	if total <= 0 {
		total = 1
	}
	if o.Width <= 0 {
		o.Width = Fitted(total)
	}
	if o.Width < 200 {
		o.Width = 200
	}
	if o.MinWidth <= 0 {
		o.MinWidth = 0.1
	}
	if o.MaxLabel <= 0 {
		o.MaxLabel = 4096
	}
	unit := t.Weight.String()
	height := ypadTop + (t.Depth+1)*frameHeight + ypadBottom
	scale := float64(o.Width-2*xpad) / float64(total)

	bw := bufio.NewWriterSize(w, 1<<16)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<svg version="1.1" id="flame" width="%d" height="%d" viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg" data-total="%d" data-unit="%s" data-width="%d" data-xpad="%d">
<defs><linearGradient id="background" y1="0" y2="1" x1="0" x2="0"><stop stop-color="#eeeeee" offset="5%%"/><stop stop-color="#eeeeb0" offset="95%%"/></linearGradient></defs>
<style type="text/css">%s</style>
<rect x="0" y="0" width="100%%" height="100%%" fill="url(#background)"/>
`, o.Width, height, o.Width, height, total, unit, o.Width, xpad, style)
	text(bw, "title", float64(o.Width)/2, 24, "middle", o.Title, 17)
	text(bw, "subtitle", float64(o.Width)/2, 44, "middle", o.Subtitle, fontSize)
	text(bw, "unzoom", xpad, 24, "", "Reset Zoom", fontSize)
	text(bw, "search", float64(o.Width-xpad), 24, "end", "Search", fontSize)
	text(bw, "matched", float64(o.Width-xpad), float64(height-15), "end", "", fontSize)
	text(bw, "details", xpad, float64(height-15), "", " ", fontSize)
	bw.WriteString("<g id=\"frames\">\n")

	r := renderer{w: bw, t: t, o: o, total: total, unit: unit, scale: scale, height: height}
	r.node(t.Root, 0)
	bw.WriteString("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n")
	bw.WriteString(script)
	bw.WriteString("]]></script>\n</svg>\n")
	return bw.Flush()
}

type renderer struct {
	w      *bufio.Writer
	t      *flame.Tree
	o      Options
	total  int
	unit   string
	scale  float64
	height int
	buf    []byte
}

// node draws n, whose left edge lies start units from the picture's left,
// then its children.
func (r *renderer) node(n *flame.Node, start int) {
	width := float64(n.Value) * r.scale
	if width < r.o.MinWidth {
		return
	}
	var label string
	if n.Depth == 0 {
		label = "all"
	} else {
		r.buf = r.t.AppendShortLabel(r.buf[:0], n, shortRuns)
		label = flame.Clean(clip(string(r.buf), r.o.MaxLabel))
	}
	x := float64(xpad) + float64(start)*r.scale
	y := r.height - ypadBottom - (n.Depth+1)*frameHeight
	share := 100 * float64(n.Value) / float64(r.total)
	fill := "rgb(240,240,240)"
	if n.Depth > 0 {
		fill = Color(n.Key.String())
	}
	w := r.w
	fmt.Fprintf(w, `<g class="f" data-x="%d" data-w="%d"><title>`, start, n.Value)
	xml.EscapeText(w, []byte(label))
	fmt.Fprintf(w, "\n%d %s, %d %s, %.2f%%", n.Value, plural(n.Value, r.unit), len(n.Ranks), plural(len(n.Ranks), "ranks"), share)
	if n.Depth > 0 {
		r.buf = rankset.AppendShort(r.buf[:0], n.Ranks, shortRuns)
		fmt.Fprintf(w, "\nranks here: %s; elsewhere: %s", orNone(string(r.buf)), orNone(string(r.t.AppendShortLeak(r.buf[:0], n, shortRuns))))
	}
	w.WriteString("</title>")
	fmt.Fprintf(w, `<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" rx="2" ry="2"/>`,
		x, y, width, frameHeight-1, fill)
	fmt.Fprintf(w, `<text x="%.2f" y="%.1f">`, x+3, float64(y)+10.5)
	xml.EscapeText(w, []byte(Fit(label, width)))
	w.WriteString("</text></g>\n")

	off := start
	if len(n.Ends) > 0 { // the stacks that end here come first, as in the folded file
		if r.t.Weight == flame.Ranks {
			off += len(n.Ends)
		} else {
			off++
		}
	}
	for _, c := range n.Children {
		r.node(c, off)
		off += c.Value
	}
}

// Fit shortens label to what fits in width pixels; "" when not even
// three characters fit. A func@file@STUCK|LEAK label is shortened in the
// middle, so that the function and the rank sets survive: first the file's
// directory goes (func@…/file.py:12@2|0-1/3), then the file (func@…@2|0-1/3),
// then the end of the function (fu…@2|0-1/3), then the LEAK set
// (func@…/file.py:12@2|…); anything else loses its end (abc..). The
// picture's script does the same when a zoom widens a frame.
func Fit(label string, width float64) string {
	n := int((width - 3) / (fontSize * fontWidth))
	if n < 3 {
		return ""
	}
	if utf8.RuneCountInString(label) <= n {
		return label
	}
	if l, ok := flame.ParseLabel(label); ok {
		fn := l.Func
		base := l.File
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = "…/" + base[i+1:]
		}
		for _, sets := range []string{"@" + l.Stuck + "|" + l.Leak, "@" + l.Stuck + "|…"} {
			for _, c := range []string{fn + "@" + base + sets, fn + "@…" + sets} {
				if utf8.RuneCountInString(c) <= n {
					return c
				}
			}
			if k := n - utf8.RuneCountInString(sets) - 1; k >= 3 {
				return string([]rune(fn)[:k]) + "…" + sets
			}
		}
	}
	runes := []rune(label)
	return string(runes[:n-2]) + ".."
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)-cut) + " bytes more)"
}

func text(w *bufio.Writer, id string, x, y float64, anchor, s string, size int) {
	fmt.Fprintf(w, `<text id="%s" x="%.1f" y="%.1f" font-size="%d"`, id, x, y, size)
	if anchor != "" {
		fmt.Fprintf(w, ` text-anchor="%s"`, anchor)
	}
	w.WriteString(">")
	xml.EscapeText(w, []byte(flame.Clean(s)))
	w.WriteString("</text>\n")
}

// plural turns "stacks" into "stack" for one.
func plural(n int, unit string) string {
	if n == 1 {
		return unit[:len(unit)-1]
	}
	return unit
}
