package election

import (
	"fmt"
	"slices"
	"testing"
)

// proc builds a Process of identity rank 0 of job "j" (world 4) with
// its environment naming it, unless changed by the options.
func proc(pid, parent int, opts ...func(*Process)) Process {
	p := Process{PID: pid, Parent: parent, Key: Key{Job: "j", Rank: 0, World: 4}, Known: true, Env: true, Seen: uint64(pid)}
	for _, o := range opts {
		o(&p)
	}
	return p
}

var (
	gpu     = func(p *Process) { p.GPU = true }
	comm    = func(p *Process) { p.Comm = true }
	python  = func(p *Process) { p.Python = true }
	exited  = func(p *Process) { p.Exited = true }
	noID    = func(p *Process) { p.Known, p.Env, p.Key = false, false, Key{Rank: -1} }
	rank    = func(r int) func(*Process) { return func(p *Process) { p.Key.Rank = r } }
	seen    = func(n uint64) func(*Process) { return func(p *Process) { p.Seen = n } }
	was     = func(r Role) func(*Process) { return func(p *Process) { p.Role = r } }
	helping = func(of int) func(*Process) { return func(p *Process) { p.Role, p.Of = Helper, of } }
)

func TestElect(t *testing.T) {
	for _, c := range []struct {
		name string
		ps   []Process
		want map[int]Vote
	}{
		{"a lone process with RANK is the rank", []Process{proc(10, 1)}, map[int]Vote{10: {Role: Rank}}},
		{"no identity and no GPU call: a candidate", []Process{proc(10, 1, noID)}, map[int]Vote{10: {Role: Candidate}}},
		{"no identity, a GPU call: a rank (numbered by the agent)", []Process{proc(10, 1, noID, gpu)}, map[int]Vote{10: {Role: Rank}}},
		{"no identity, a communicator: a rank", []Process{proc(10, 1, noID, comm)}, map[int]Vote{10: {Role: Rank}}},
		{
			"a DataLoader worker is its rank's helper",
			[]Process{proc(10, 1, python, gpu), proc(11, 10, python), proc(12, 10, python)},
			map[int]Vote{10: {Role: Rank}, 11: {Role: Helper, Of: 10}, 12: {Role: Helper, Of: 10}},
		},
		{
			"a worker that made GPU calls (pin memory) is a helper still: the outer of two alike",
			[]Process{proc(10, 1, python, gpu), proc(11, 10, python, gpu)},
			map[int]Vote{10: {Role: Rank}, 11: {Role: Helper, Of: 10}},
		},
		{
			"pyenv's shim: the shell above the python that runs the GPU is a wrapper",
			[]Process{proc(10, 1), proc(11, 10, python, gpu)},
			map[int]Vote{10: {Role: Wrapper}, 11: {Role: Rank}},
		},
		{
			"a python above the process that made the GPU calls is a wrapper (less like a rank)",
			[]Process{proc(10, 1, python), proc(11, 10, python, gpu)},
			map[int]Vote{10: {Role: Wrapper}, 11: {Role: Rank}},
		},
		{
			"the shim's python helper, before the shim execs python: it is the rank, the shim a wrapper",
			[]Process{proc(10, 1), proc(11, 10, python)},
			map[int]Vote{10: {Role: Wrapper}, 11: {Role: Rank}},
		},
		{
			"the helper exited, the shim still a wrapper: a wrapper until it execs",
			[]Process{proc(10, 1, was(Wrapper)), proc(11, 10, python, exited, was(Rank))},
			map[int]Vote{10: {Role: Wrapper}, 11: {Role: Exited}},
		},
		{
			"the shim exec'd python (its marks cleared): the rank again",
			[]Process{proc(10, 1, python, gpu), proc(11, 10, python, exited, was(Rank))},
			map[int]Vote{10: {Role: Rank}, 11: {Role: Exited}},
		},
		{
			"a DataLoader worker first looked at after its rank exited is that rank's helper",
			[]Process{proc(10, 1, python, gpu, exited, was(Rank)), proc(11, 10, python)},
			map[int]Vote{10: {Role: Exited}, 11: {Role: Helper, Of: 10}},
		},
		{
			"a worker of an exited rank through an exited subshell is its helper",
			[]Process{proc(10, 1, python, gpu, exited, was(Rank)), proc(11, 10, exited, was(Helper)), proc(12, 11, python)},
			map[int]Vote{10: {Role: Exited}, 11: {Role: Exited}, 12: {Role: Helper, Of: 10}},
		},
		{
			"below an exited wrapper of the identity: no helper, the rank",
			[]Process{proc(10, 1, python, exited, was(Wrapper)), proc(11, 10, python, gpu)},
			map[int]Vote{10: {Role: Exited}, 11: {Role: Rank}},
		},
		{
			"below an exited process of another identity: the rank",
			[]Process{proc(10, 1, python, gpu, rank(1), exited, was(Rank)), proc(11, 10, python)},
			map[int]Vote{10: {Role: Exited}, 11: {Role: Rank}},
		},
		{
			"an exited parent with no identity: the rank under it stays the rank",
			[]Process{proc(10, 1, noID, exited), proc(11, 10, python, gpu)},
			map[int]Vote{10: {Role: Exited}, 11: {Role: Rank}},
		},
		{"a child known before its parent: of the outer ones, the one known first (FuzzElect)",
			[]Process{proc(100, 1, comm, python, seen(3)), proc(101, 1, comm, python, seen(2)), proc(102, 100, comm, python, seen(1))},
			map[int]Vote{100: {Role: Shadow}, 101: {Role: Rank}, 102: {Role: Shadow}}},
		{
			"siblings alike with no kinship known: the one known first is the rank, the other its shadow",
			[]Process{proc(20, 0, python, seen(2)), proc(10, 0, python, seen(1))},
			map[int]Vote{10: {Role: Rank}, 20: {Role: Shadow}},
		},
		{
			"a shadow is the rank once alone (demoted, then elected again)",
			[]Process{proc(20, 0, python, seen(2), was(Shadow)), proc(10, 0, python, seen(1), exited, was(Rank))},
			map[int]Vote{10: {Role: Exited}, 20: {Role: Rank}},
		},
		{
			"a helper stays a helper once its rank exited (until it execs)",
			[]Process{proc(11, 10, python, helping(10)), proc(10, 1, python, gpu, exited, was(Rank))},
			map[int]Vote{10: {Role: Exited}, 11: {Role: Helper, Of: 10}},
		},
		{
			"a helper is never the owner, even alone among the live",
			[]Process{proc(11, 0, python, gpu, helping(10)), proc(12, 0, python, seen(99))},
			map[int]Vote{11: {Role: Helper, Of: 10}, 12: {Role: Rank}},
		},
		{
			"out of scope: never a rank",
			[]Process{proc(10, 1, python, gpu, was(Outside))},
			map[int]Vote{10: {Role: Outside}},
		},
		{
			"an out-of-scope process takes no part: the other is alone",
			[]Process{proc(10, 1, python, gpu, was(Outside)), proc(11, 10, python)},
			map[int]Vote{10: {Role: Outside}, 11: {Role: Rank}},
		},
		{
			"identities apart: each its own rank",
			[]Process{proc(10, 1, python, gpu), proc(11, 1, python, gpu, rank(1)), proc(12, 11, python, rank(1))},
			map[int]Vote{10: {Role: Rank}, 11: {Role: Rank}, 12: {Role: Helper, Of: 11}},
		},
		{
			"a communicator's identity groups like the environment's",
			[]Process{proc(10, 1, python, comm, func(p *Process) { p.Env = false }), proc(11, 10, python, func(p *Process) { p.Env = false })},
			map[int]Vote{10: {Role: Rank}, 11: {Role: Helper, Of: 10}},
		},
		{
			"pids reused into a cycle end the walk",
			[]Process{proc(10, 11, python), proc(11, 10, python, gpu)},
			map[int]Vote{10: {Role: Helper, Of: 11}, 11: {Role: Rank}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The votes must not turn on the order the agent lists its
			// processes in (a map's).
			for _, ps := range [][]Process{c.ps, reversed(c.ps)} {
				got := map[int]Vote{}
				for i, v := range Elect(ps) {
					got[ps[i].PID] = v
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Errorf("Elect(%v) = %v, want %v", pids(ps), got, c.want)
				}
			}
		})
	}
}

func reversed(ps []Process) []Process {
	out := slices.Clone(ps)
	slices.Reverse(out)
	return out
}

func pids(ps []Process) []int {
	var out []int
	for _, p := range ps {
		out = append(out, p.PID)
	}
	return out
}

func TestElectReadsOnly(t *testing.T) {
	ps := []Process{proc(10, 1, python, gpu), proc(11, 10, python)}
	before := slices.Clone(ps)
	Elect(ps)
	if !slices.Equal(ps, before) {
		t.Fatalf("Elect changed its input: %v, was %v", ps, before)
	}
}

func TestRoleString(t *testing.T) {
	var got []string
	for r := Candidate; r <= Exited+1; r++ {
		got = append(got, r.String())
	}
	want := []string{"candidate", "rank", "helper", "wrapper", "shadow", "outside", "exited", "role(7)"}
	if !slices.Equal(got, want) {
		t.Fatalf("roles %v, want %v", got, want)
	}
}
