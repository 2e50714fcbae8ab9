// Package flame merges the stacks of many ranks into one trie, as
// xpu_timer's stacktrace viewer does: every node remembers which ranks
// passed through it, and is labelled func@file@STUCK|LEAK, where STUCK is
// the folded set of those ranks and LEAK the folded set of all others.
package flame

import (
	"slices"
	"strconv"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Weight chooses what a flame's width counts.
type Weight int

const (
	// Stacks gives every distinct stack (leaf path) weight 1, as xpu_timer
	// does: widths count distinct stacks, not ranks.
	Stacks Weight = iota
	// Ranks makes a stack as wide as the number of ranks that have it.
	Ranks
)

func (w Weight) String() string {
	if w == Ranks {
		return "ranks"
	}
	return "stacks"
}

// Key identifies a frame in the trie: its label is Func@File, with ":Line"
// appended to File when Line is set.
type Key struct {
	Func string
	File string
	Line int
}

// Unknown is the name of a frame part that is not known.
const Unknown = "??"

// FrameKey keys f as the reference grammar says: file is "path:line" for
// Python frames and for native frames with line information, else the
// module path; "??" when unknown. A Python frame's function is its bare
// name (co_name), as faulthandler, py-spy and xpu_timer print it, on every
// CPython version: a qualified name (co_qualname, "Trainer.step", which
// dumps of 3.11+ written before schema 1.1 carry) is cut to its last part.
func FrameKey(f *stack.Frame) Key {
	k := Key{Func: f.Func, File: f.File}
	if k.Func == "" {
		k.Func = Unknown
	}
	if f.Module == "python" {
		k.Func = BareName(k.Func)
	}
	if k.File != "" && f.Line > 0 {
		k.Line = f.Line
	} else if f.Module != "" && f.Module != "python" {
		k.File = f.Module
	} else if k.File == "" {
		k.File = Unknown
	}
	return k
}

// BareName is a Python function's co_name given its co_qualname:
// "Trainer.step" -> "step", "train.<locals>.Trainer.step" -> "step". A
// name with no dot, or one that ends in a dot, is returned as is.
func BareName(qualname string) string {
	i := strings.LastIndexByte(qualname, '.')
	if i < 0 || i == len(qualname)-1 {
		return qualname
	}
	return qualname[i+1:]
}

// StateKey is the single frame that carries a rank's process state.
func StateKey(state string) Key {
	if state == "" {
		state = Unknown
	}
	return Key{Func: "State", File: state}
}

// String is the frame's func@file.
func (k Key) String() string {
	if k.Line > 0 {
		return k.Func + "@" + k.File + ":" + strconv.Itoa(k.Line)
	}
	return k.Func + "@" + k.File
}

// Node is one frame of the trie.
type Node struct {
	Key      Key
	Parent   *Node
	Children []*Node // sorted by label after Finish
	Ranks    []int   // ranks that passed through here; sorted and distinct after Finish
	Ends     []int   // ranks with a stack that ends here; sorted and distinct after Finish
	Value    int     // width under the tree's weight, set by Finish
	Depth    int     // 0 for the root

	index map[Key]*Node
}

// Tree is the merged trie of all ranks' stacks.
type Tree struct {
	Root   *Node
	World  int    // ranks 0..World-1; those never added count in every LEAK set
	Weight Weight // set by Finish
	Nodes  int    // nodes below the root
	Stacks int    // stacks added
	Depth  int    // deepest node
}

// New returns an empty tree for a job of world ranks.
func New(world int) *Tree {
	return &Tree{Root: &Node{Key: Key{Func: "all"}}, World: world}
}

// Add inserts one stack of rank, outermost frame first, and returns the
// node where it ends (the root for an empty stack).
func (t *Tree) Add(rank int, keys []Key) *Node {
	n := t.Root
	mark(&n.Ranks, rank)
	for _, k := range keys {
		c := n.index[k]
		if c == nil {
			c = &Node{Key: k, Parent: n, Depth: n.Depth + 1}
			if n.index == nil {
				n.index = make(map[Key]*Node)
			}
			n.index[k] = c
			n.Children = append(n.Children, c)
			t.Nodes++
			t.Depth = max(t.Depth, c.Depth)
		}
		mark(&c.Ranks, rank)
		n = c
	}
	mark(&n.Ends, rank)
	t.Stacks++
	return n
}

// AddFrames inserts a stack given innermost first, as captured.
func (t *Tree) AddFrames(rank int, frames []stack.Frame, buf []Key) ([]Key, *Node) {
	buf = buf[:0]
	for i := len(frames) - 1; i >= 0; i-- {
		buf = append(buf, FrameKey(&frames[i]))
	}
	return buf, t.Add(rank, buf)
}

// mark appends rank unless it is the last one recorded (ranks are mostly
// added one after another; Finish sorts and removes the rest).
func mark(s *[]int, rank int) {
	if n := len(*s); n == 0 || (*s)[n-1] != rank {
		*s = append(*s, rank)
	}
}

// Finish sorts children and rank sets and computes widths under w. Call it
// once after the last Add.
func (t *Tree) Finish(w Weight) {
	t.Weight = w
	var walk func(n *Node) int
	walk = func(n *Node) int {
		n.index = nil
		n.Ranks = sortDistinct(n.Ranks)
		n.Ends = sortDistinct(n.Ends)
		slices.SortFunc(n.Children, func(a, b *Node) int { return compareKeys(a.Key, b.Key) })
		v := 0
		if len(n.Ends) > 0 {
			if w == Ranks {
				v = len(n.Ends)
			} else {
				v = 1
			}
		}
		for _, c := range n.Children {
			v += walk(c)
		}
		n.Value = v
		return v
	}
	walk(t.Root)
}

func compareKeys(a, b Key) int {
	if c := strings.Compare(a.Func, b.Func); c != 0 {
		return c
	}
	if c := strings.Compare(a.File, b.File); c != 0 {
		return c
	}
	return a.Line - b.Line
}

func sortDistinct(s []int) []int {
	if !slices.IsSorted(s) {
		slices.Sort(s)
	}
	return slices.Compact(s)
}

// Stuck is the folded set of ranks that reached n.
func (t *Tree) Stuck(n *Node) string { return rankset.Fold(n.Ranks) }

// Leak is the folded set of ranks in 0..World-1 that did not reach n.
func (t *Tree) Leak(n *Node) string { return string(appendComplement(nil, n.Ranks, t.World)) }

// Label is n's full label, func@file@STUCK|LEAK.
func (t *Tree) Label(n *Node) string { return string(t.AppendLabel(nil, n)) }

// AppendLabel appends n's label to dst.
func (t *Tree) AppendLabel(dst []byte, n *Node) []byte {
	dst = t.appendFrame(dst, n)
	dst = rankset.AppendFold(dst, n.Ranks)
	dst = append(dst, '|')
	return appendComplement(dst, n.Ranks, t.World)
}

// appendFrame appends "func@file:line@".
func (t *Tree) appendFrame(dst []byte, n *Node) []byte {
	dst = append(dst, n.Key.Func...)
	dst = append(dst, '@')
	dst = append(dst, n.Key.File...)
	if n.Key.Line > 0 {
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, int64(n.Key.Line), 10)
	}
	return append(dst, '@')
}

// AppendShortLabel appends n's label with each rank set shortened to its
// first runs runs and the count of the ranks left out
// (rankset.AppendShort): func@file@0/4/8+4093|1-3/5-7+8189. Pictures use
// it; the folded file and pprof keep the sets whole.
func (t *Tree) AppendShortLabel(dst []byte, n *Node, runs int) []byte {
	dst = t.appendFrame(dst, n)
	dst = rankset.AppendShort(dst, n.Ranks, runs)
	dst = append(dst, '|')
	return t.AppendShortLeak(dst, n, runs)
}

// AppendShortLeak appends Leak(n) shortened to its first runs runs and
// the count of the ranks left out.
func (t *Tree) AppendShortLeak(dst []byte, n *Node, runs int) []byte {
	return appendComplementShort(dst, n.Ranks, t.World, runs)
}

// appendComplement folds 0..world-1 minus ranks (sorted, distinct) in time
// proportional to len(ranks), not world. Ranks at or above world (a file
// whose name disagrees) are ignored.
func appendComplement(dst []byte, ranks []int, world int) []byte {
	return appendComplementShort(dst, ranks, world, -1)
}

// appendComplementShort is appendComplement keeping at most runs runs
// (all when runs < 0), then "+N", N the ranks of the complement left out.
func appendComplementShort(dst []byte, ranks []int, world, runs int) []byte {
	in := 0 // distinct ranks of ranks below world
	for i, r := range ranks {
		if r >= world {
			break
		}
		if i == 0 || r != ranks[i-1] {
			in++
		}
	}
	left := world - in // ranks of the complement not yet written
	n := 0
	run := func(a, b int) bool {
		if a > b {
			return true
		}
		if n == runs {
			dst = strconv.AppendInt(append(dst, '+'), int64(left), 10)
			return false
		}
		if n > 0 {
			dst = append(dst, '/')
		}
		n++
		left -= b - a + 1
		dst = strconv.AppendInt(dst, int64(a), 10)
		if b > a {
			dst = append(dst, '-')
			dst = strconv.AppendInt(dst, int64(b), 10)
		}
		return true
	}
	next := 0
	for _, r := range ranks {
		if r >= world {
			break
		}
		if !run(next, r-1) {
			return dst
		}
		next = max(next, r+1)
	}
	run(next, world-1)
	return dst
}

// Walk calls fn for every node below the root, depth first, children in
// order; fn returning false skips that node's children.
func (t *Tree) Walk(fn func(n *Node) bool) {
	var walk func(n *Node)
	walk = func(n *Node) {
		for _, c := range n.Children {
			if fn(c) {
				walk(c)
			}
		}
	}
	walk(t.Root)
}
