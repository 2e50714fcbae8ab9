// Package viewer merges the hang dumps of every rank of a job into the
// pictures and the report a person opens when the job hangs: folded stacks
// and flame graphs of the native, Python and mixed stacks, a pprof profile,
// and the culprit report. It is xpu_timer_stacktrace_viewer without the
// command line.
package viewer

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/viewer/culprit"
	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// ErrNoStacks means a directory holds no readable stack file.
var ErrNoStacks = errors.New("no stack files")

// Options of one run.
type Options struct {
	Dir     string       // where the *.stacktrace files are
	Out     string       // where the outputs go; default Dir
	Weight  flame.Weight // what widths count
	Width   int          // SVG width in pixels; default svg.Fitted
	Workers int          // files read in parallel; default GOMAXPROCS
	// Incarnation, when set, picks the incarnation to merge; by default
	// the newest group of dumps is merged.
	Incarnation *int
	MaxFileSize int64 // bytes one stack file may have; default DefaultMaxFileSize
}

// Skipped is a file left out of the merge, and why.
type Skipped struct {
	Path string
	Err  error
}

// Group is the dumps of one incarnation of one job with one world size:
// the viewer merges one group.
type Group struct {
	Job         string
	Incarnation int
	World       int
	Files       []string  // base names, sorted
	Newest      time.Time // the latest dump time (file time when the dump has none)
	Merged      bool
}

func (g *Group) String() string {
	job := g.Job
	if job == "" {
		job = "(unnamed)"
	}
	return fmt.Sprintf("job %s incarnation %d world size %d", job, g.Incarnation, g.World)
}

// Result is what a run found and wrote.
type Result struct {
	World   int
	Files   int // files merged
	Missing []int
	Skipped []Skipped
	// Groups lists every group of dumps found, newest first, when there
	// is more than one; Conflicts names what disagrees (two world sizes in
	// one incarnation, two files for one rank).
	Groups    []*Group
	Conflicts []string
	Report    *culprit.Report
	Summary   string   // summary.txt's text
	Outputs   []string // paths written
}

// Views are the three merged pictures: native frames, Python frames, and
// the merged native+Python stacks.
type Views struct {
	Cpp, Py, Mixed *flame.Tree
}

type groupKey struct {
	job   string
	inc   int
	world int
}

// Merge reads every *.stacktrace file in dir, sorts them into groups by
// job, incarnation and world size, and merges one group: the one
// o.Incarnation names, else the newest. It returns ErrNoStacks when dir has
// no readable stack file; unreadable files are skipped and listed in the
// result, and so are conflicts between files.
func Merge(o Options) (*Views, *Result, error) {
	paths, skipped, err := list(o.Dir)
	if err != nil {
		return nil, nil, err
	}
	res := &Result{Skipped: skipped}
	if len(paths) == 0 {
		return nil, res, fmt.Errorf("%w: no readable *%s files in %s%s", ErrNoStacks, dumpfile.Ext, o.Dir, skippedNote(skipped))
	}
	limit := o.MaxFileSize
	if limit <= 0 {
		limit = DefaultMaxFileSize
	}
	mergers := map[groupKey]*merger{}
	groups := map[groupKey]*Group{}
	load(paths, o.Workers, limit, func(l loaded) {
		if l.err == nil {
			l.err = l.check()
		}
		if l.err != nil {
			res.Skipped = append(res.Skipped, Skipped{Path: l.path, Err: l.err})
			return
		}
		f := l.file
		k := groupKey{f.Job, f.Incarnation, f.WorldSize}
		m := mergers[k]
		if m == nil {
			m = newMerger(f.WorldSize)
			mergers[k] = m
			groups[k] = &Group{Job: k.job, Incarnation: k.inc, World: k.world}
		}
		if first, ok := m.ranks[f.Rank]; ok {
			res.Conflicts = append(res.Conflicts, fmt.Sprintf("two files for rank %d of %s: %s merged, %s left out",
				f.Rank, groups[k], first.rank.File, filepath.Base(l.path)))
			return
		}
		m.add(l)
		g := groups[k]
		g.Files = append(g.Files, filepath.Base(l.path))
		t := f.DumpedAt
		if t.IsZero() {
			t = l.modified
		}
		if t.After(g.Newest) {
			g.Newest = t
		}
	})
	sortSkipped(res.Skipped)
	if len(groups) == 0 {
		return nil, res, fmt.Errorf("%w: none of the %d *%s files in %s is readable (first: %v)",
			ErrNoStacks, len(paths), dumpfile.Ext, o.Dir, firstErr(res.Skipped))
	}
	k, err := pick(groups, o.Incarnation, res)
	if err != nil {
		return nil, res, err
	}
	m := mergers[k]
	if anon := (groupKey{world: k.world}); k != anon && groups[anon] != nil {
		// Files that name no job (xpu_timer's, or ours before schema 1.1)
		// join the merged group of their world size: read them again.
		g := groups[anon]
		g.Merged = true
		var again []string
		for _, name := range g.Files {
			again = append(again, filepath.Join(o.Dir, name))
		}
		load(again, o.Workers, limit, func(l loaded) {
			if l.err != nil {
				res.Skipped = append(res.Skipped, Skipped{Path: l.path, Err: l.err})
				return
			}
			if first, ok := m.ranks[l.file.Rank]; ok {
				res.Conflicts = append(res.Conflicts, fmt.Sprintf("two files for rank %d of %s: %s merged, %s left out",
					l.file.Rank, groups[k], first.rank.File, filepath.Base(l.path)))
				return
			}
			m.add(l)
		})
	}
	views, ranks := m.finish(o.Weight)
	res.World = m.world
	res.Files = len(ranks)
	res.Report = culprit.Analyse(m.world, ranks)
	res.Missing = res.Report.Missing
	return views, res, nil
}

// pick chooses the group to merge, lists every group in res when there is
// more than one, and names world sizes that disagree within an incarnation.
func pick(groups map[groupKey]*Group, inc *int, res *Result) (groupKey, error) {
	keys := slices.SortedFunc(maps.Keys(groups), func(a, b groupKey) int {
		ga, gb := groups[a], groups[b]
		return cmp.Or(gb.Newest.Compare(ga.Newest), b.inc-a.inc, len(gb.Files)-len(ga.Files),
			strings.Compare(a.job, b.job), a.world-b.world)
	})
	worlds := map[[2]any][]groupKey{}
	for _, k := range keys {
		slices.Sort(groups[k].Files)
		worlds[[2]any{k.job, k.inc}] = append(worlds[[2]any{k.job, k.inc}], k)
	}
	for _, k := range keys {
		same := worlds[[2]any{k.job, k.inc}]
		if len(same) < 2 || same[0] != k {
			continue
		}
		var parts []string
		for _, s := range same {
			parts = append(parts, fmt.Sprintf("%d (%s)", s.world, strings.Join(groups[s].Files, ", ")))
		}
		job := groups[k].String()
		job = job[:strings.LastIndex(job, " world size")]
		res.Conflicts = append(res.Conflicts, fmt.Sprintf("%s has dumps of %d world sizes: %s", job, len(same), strings.Join(parts, "; ")))
	}
	chosen := keys[0]
	if chosen.job == "" {
		// Files that name no job join a named group of their world size.
		if i := slices.IndexFunc(keys, func(k groupKey) bool { return k.job != "" && k.world == chosen.world }); i >= 0 {
			chosen = keys[i]
		}
	}
	if inc != nil {
		i := slices.IndexFunc(keys, func(k groupKey) bool { return k.inc == *inc })
		if i < 0 {
			var have []string
			for _, k := range keys {
				have = append(have, groups[k].String())
			}
			return groupKey{}, fmt.Errorf("%w: no dumps of incarnation %d (found %s)", ErrNoStacks, *inc, strings.Join(have, "; "))
		}
		chosen = keys[i]
	}
	groups[chosen].Merged = true
	if len(keys) > 1 {
		for _, k := range keys {
			res.Groups = append(res.Groups, groups[k])
		}
	}
	return chosen, nil
}

func skippedNote(s []Skipped) string {
	if len(s) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d skipped, first: %v)", len(s), s[0].Err)
}

// check compares what a file holds with what its name says.
func (l *loaded) check() error {
	f := l.file
	if l.world > 0 && (l.rank != f.Rank || l.world != f.WorldSize) {
		return fmt.Errorf("%s: %w: holds rank %d of %d, its name says %d of %d",
			l.path, dumpfile.ErrCorrupt, f.Rank, f.WorldSize, l.rank, l.world)
	}
	return nil
}

// merger folds dumps into the three trees as they arrive.
type merger struct {
	world          int
	cpp, py, mixed *flame.Tree
	ranks          map[int]*rankInfo
	buf            []flame.Key
}

type rankInfo struct {
	rank    culprit.Rank
	threads []threadEnd
}

type threadEnd struct {
	tid    int
	name   string
	state  string
	role   culprit.Role
	helper string
	proc   int // the helper process, 0 for the rank's own threads
	main   bool
	end    *flame.Node
	pyEnd  *flame.Node // where its Python stack ends in the Python tree; nil without one
	tip    int         // C library frames at the tip of the stack
	py     string      // innermost Python frame
	wait   string      // native wait site
	coll   bool
	waits  string        // what it waits in, when its stack is inside a collective or a wait
	frames []stack.Frame // innermost first, from the first frame past the tip; only the first few are kept
}

func newMerger(world int) *merger {
	return &merger{world: world, ranks: map[int]*rankInfo{},
		cpp: flame.New(world), py: flame.New(world), mixed: flame.New(world)}
}

// add merges one dump of a rank the merger has not seen, of its world
// size (dumpfile and protodump have checked the rank is inside it).
func (m *merger) add(l loaded) {
	f := l.file
	rank := f.Rank
	state := []flame.Key{flame.StateKey(f.State)}
	m.cpp.Add(rank, state)
	m.py.Add(rank, state)
	m.mixed.Add(rank, state)
	info := &rankInfo{rank: culprit.Rank{
		Rank: rank, File: filepath.Base(l.path), State: f.State, Reason: f.Reason, Hang: f.Hang, Comms: f.Comms,
	}}
	driver := driverOf(f.Threads, f.PID)
	threads := f.Threads
	var procs []int // of each thread past f.Threads: its helper process
	if len(f.Helpers) > 0 {
		// The rank's forked workers are part of its picture, named as
		// such: a DataLoader worker stuck in I/O is often the answer.
		threads = slices.Clone(threads)
		for _, h := range f.Helpers {
			for _, t := range h.Threads {
				t.Name = fmt.Sprintf("helper %d: %s", h.PID, t.Name)
				threads = append(threads, t)
				procs = append(procs, h.PID)
			}
		}
	}
	for i := range threads {
		t := &threads[i]
		proc := 0
		if i >= len(f.Threads) {
			proc = procs[i-len(f.Threads)]
		}
		if len(t.Native) > 0 {
			m.buf, _ = m.cpp.AddFrames(rank, t.Native, m.buf)
		}
		var pyEnd *flame.Node
		if len(t.Python) > 0 {
			m.buf, pyEnd = m.py.AddFrames(rank, t.Python, m.buf)
		}
		frames := t.Merged
		if len(frames) == 0 {
			frames = t.Native
		}
		if len(frames) == 0 {
			frames = t.Python
		}
		var end *flame.Node
		m.buf, end = m.mixed.AddFrames(rank, frames, m.buf)
		tip := systemTip(frames)
		role, helper := roleOf(t, frames, i == driver)
		info.threads = append(info.threads, threadEnd{tid: t.TID, name: t.Name, state: t.State, role: role, helper: helper, proc: proc,
			main: t.TID == f.PID, end: end, pyEnd: pyEnd, tip: tip, py: pyFrame(t), wait: waitSite(frames),
			coll: throughColl(frames), waits: waitOf(t, frames, role), frames: slices.Clone(frames[tip:min(len(frames), tip+3)])})
	}
	m.ranks[rank] = info
}

// finish completes the trees and reduces every rank for the report.
func (m *merger) finish(w flame.Weight) (*Views, []culprit.Rank) {
	m.cpp.Finish(w)
	m.py.Finish(w)
	m.mixed.Finish(w)
	ids := map[*flame.Node]int{}
	pyIDs := map[*flame.Node]int{}
	ranks := make([]culprit.Rank, 0, len(m.ranks))
	for r := range m.world {
		info := m.ranks[r]
		if info == nil {
			continue
		}
		for _, t := range info.threads {
			sig := significant(t.end, t.tip)
			id, ok := ids[sig]
			if !ok {
				id = len(ids) + 1
				ids[sig] = id
			}
			pyID := 0
			if t.pyEnd != nil {
				if pyID = pyIDs[t.pyEnd]; pyID == 0 {
					pyID = len(pyIDs) + 1
					pyIDs[t.pyEnd] = pyID
				}
			}
			info.rank.Threads = append(info.rank.Threads, culprit.Thread{
				TID: t.tid, Name: t.name, State: t.state, Role: t.role, Helper: t.helper, Process: t.proc, Main: t.main,
				Stack: id, PyStack: pyID, Where: where(t.frames), Py: t.py, Wait: t.wait, Coll: t.coll, Waits: t.waits,
				Frames: func() []string { return path(sig) }})
		}
		ranks = append(ranks, info.rank)
	}
	return &Views{Cpp: m.cpp, Py: m.py, Mixed: m.mixed}, ranks
}

// significant drops the tip C library frames of a stack (counted by
// systemTip): which system call a waiting thread was caught in (futex,
// sched_yield, nanosleep) says little, and differs between moments of the
// same wait.
func significant(n *flame.Node, tip int) *flame.Node {
	for ; tip > 0 && n.Depth > 1; tip-- {
		n = n.Parent
	}
	return n
}

// systemTip counts the C library frames at the tip of frames (innermost
// first), leaving at least one frame. A frame's library is its module; a
// frame keyed by a source line still has one.
func systemTip(frames []stack.Frame) int {
	n := 0
	for n < len(frames)-1 && isSystem(frameObject(&frames[n])) {
		n++
	}
	return n
}

// frameObject is the file a frame's code lives in: its module, else (old
// dumps without one) the file of its key.
func frameObject(f *stack.Frame) string {
	if f.Module != "" {
		return f.Module
	}
	return flame.FrameKey(f).File
}

func isSystem(module string) bool {
	base := filepath.Base(module)
	for _, p := range []string{"libc.so", "libc-", "libpthread", "ld-linux", "[vdso]", "linux-vdso"} {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}

// throughColl says whether a stack runs through a collective library.
func throughColl(frames []stack.Frame) bool {
	for i := range frames {
		if isCollLib(frameObject(&frames[i])) {
			return true
		}
	}
	return false
}

// isCollLib says whether a module is a collective library (NCCL, RCCL, MCCL).
func isCollLib(module string) bool {
	base := filepath.Base(module)
	return strings.HasPrefix(base, "libnccl") || strings.HasPrefix(base, "libmccl") || strings.HasPrefix(base, "librccl")
}

// path lists the frames from the root to n, outermost first.
func path(n *flame.Node) []string {
	var out []string
	for ; n != nil && n.Depth > 0; n = n.Parent {
		out = append(out, flame.Clean(n.Key.String()))
	}
	slices.Reverse(out)
	return out
}

// where describes a stack by its innermost frames.
func where(frames []stack.Frame) string {
	if len(frames) == 0 {
		return "(no frames)"
	}
	parts := make([]string, len(frames))
	for i := range frames {
		parts[i] = culprit.Brief(flame.Clean(flame.FrameKey(&frames[i]).String()))
	}
	return strings.Join(parts, " <- ")
}

func firstErr(s []Skipped) error {
	if len(s) == 0 {
		return nil
	}
	return s[0].Err
}

func subtitle(res *Result, w flame.Weight) string {
	s := fmt.Sprintf("world size %d: %d stack files", res.World, res.Files)
	if len(res.Missing) > 0 {
		s += ", missing ranks " + rankset.Short(res.Missing, 8) // the picture's subtitle: shortened like its labels
	} else {
		s += ", no rank missing"
	}
	if len(res.Skipped) > 0 {
		s += fmt.Sprintf(", %d unreadable", len(res.Skipped))
	}
	if w == flame.Ranks {
		return s + "; widths count ranks"
	}
	return s + "; widths count distinct stacks"
}
