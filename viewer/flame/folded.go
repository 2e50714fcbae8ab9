package flame

import (
	"bufio"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteFolded writes t in the folded format of flamegraph.pl and inferno:
// one line per distinct stack, its frame labels outermost first joined by
// ";", a space, and the stack's weight. Both tools split frames on ";" and
// take the last space-separated field as the count, so labels pass through
// Sanitize first: ";" becomes ",", and control characters and invalid UTF-8
// become U+FFFD (a newline would end the line).
func (t *Tree) WriteFolded(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var labels [][]byte // labels[d] is the sanitized label of the node at depth d+1
	var line, scratch []byte
	var walk func(n *Node) error
	walk = func(n *Node) error {
		if n.Depth > 0 {
			for len(labels) < n.Depth {
				labels = append(labels, nil)
			}
			scratch = t.AppendLabel(scratch[:0], n)
			labels[n.Depth-1] = appendSanitized(labels[n.Depth-1][:0], scratch, true)
			if len(n.Ends) > 0 {
				line = line[:0]
				for i := 0; i < n.Depth; i++ {
					if i > 0 {
						line = append(line, ';')
					}
					line = append(line, labels[i]...)
				}
				line = append(line, ' ')
				weight := 1
				if t.Weight == Ranks {
					weight = len(n.Ends)
				}
				line = strconv.AppendInt(line, int64(weight), 10)
				line = append(line, '\n')
				if _, err := bw.Write(line); err != nil {
					return err
				}
			}
		}
		for _, c := range n.Children {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(t.Root); err != nil {
		return err
	}
	return bw.Flush()
}

// Sanitize makes s safe as one frame of a folded line (see WriteFolded).
func Sanitize(s string) string { return string(appendSanitized(nil, []byte(s), true)) }

// Clean replaces control characters and invalid UTF-8 in s with U+FFFD,
// keeping ";" (for pictures, where only the line structure matters).
func Clean(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return string(appendSanitized(nil, []byte(s), false))
		}
	}
	return s
}

func appendSanitized(dst, s []byte, semicolon bool) []byte {
	for len(s) > 0 {
		c := s[0]
		if c < utf8.RuneSelf {
			switch {
			case c < 0x20 || c == 0x7f:
				dst = append(dst, "\uFFFD"...)
			case c == ';' && semicolon:
				dst = append(dst, ',')
			default:
				dst = append(dst, c)
			}
			s = s[1:]
			continue
		}
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 || r >= 0x80 && r < 0xa0 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, s[:size]...)
		}
		s = s[size:]
	}
	return dst
}

// Label is a node label split into its parts.
type Label struct {
	Frame string // func@file
	Func  string
	File  string
	Stuck string // folded ranks that reached the frame
	Leak  string // folded ranks that did not
}

// ParseLabel splits a func@file@STUCK|LEAK label. "@" also appears inside
// symbol names (pthread_cond_wait@@GLIBC_2.3.2) and process states
// (State@R (running)), so the label is split from the right: the rank sets
// after the last "@" (digits, "-", "/" and one "|"), the file after the "@"
// before them, the function name is everything left of that.
func ParseLabel(s string) (Label, bool) {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return Label{}, false
	}
	stuck, leak, ok := strings.Cut(s[at+1:], "|")
	if !ok || !isRanks(stuck) || !isRanks(leak) {
		return Label{}, false
	}
	frame := s[:at]
	at2 := strings.LastIndexByte(frame, '@')
	if at2 < 0 {
		return Label{}, false
	}
	return Label{Frame: frame, Func: frame[:at2], File: frame[at2+1:], Stuck: stuck, Leak: leak}, true
}

func isRanks(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && c != '-' && c != '/' && c != '+' {
			return false
		}
	}
	return true
}
