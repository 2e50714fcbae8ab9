package culprit

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

func comm(issued, completed uint64) []dumpfile.CommState {
	return []dumpfile.CommState{{ID: "3f2a0b1c9d8e7f60a1b2c3d4e5f60718", NRanks: 32, Issued: issued, Completed: completed, LastOp: "AllReduce"}}
}

func gpuHang(op *dumpfile.Op) *dumpfile.Hang { return &dumpfile.Hang{Kind: "gpu", Oldest: op} }

var coll = &dumpfile.Op{Kind: "collective", Op: "AllReduce", Seq: 6650, Comm: "3f2a0b1c9d8e7f60a1b2c3d4e5f60718"}

// job makes world ranks with identical threads; edit tweaks rank i.
func job(world int, edit func(i int, r *Rank)) []Rank {
	var out []Rank
	for i := range world {
		r := Rank{Rank: i, State: "S (sleeping)", Comms: comm(6650, 6649), Hang: gpuHang(coll),
			Threads: []Thread{{TID: 1, Name: "python3", Stack: 1, Where: "main"}, {TID: 2, Name: "gpu-stream2", Stack: 2, Where: "wait_peers", Coll: true},
				{TID: 3, Name: "pt_nccl_watchdg", Stack: 3, Where: "sleep", Role: Background, Helper: "NCCL watchdog"}}}
		if edit != nil {
			edit(i, &r)
		}
		out = append(out, r)
	}
	return out
}

// glooKernel is the H100 hang: world ranks over gloo, no communicator;
// rank hung in a kernel, its gloo thread in a CUDA synchronize; the
// others decided kind, their gloo threads waiting in the collective.
func glooKernel(world, rank int, kind dumpfile.HangKind) []Rank {
	return job(world, func(i int, r *Rank) {
		r.Comms = nil
		r.Hang = &dumpfile.Hang{Kind: kind, AgeNs: 11e9, Timeout: 10e9}
		r.Threads[2].Waits = "gloo collective"
		if i == rank {
			r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 11e9, Timeout: 10e9, Oldest: &dumpfile.Op{Kind: "kernel", Kernel: "spin"}}
			r.Threads[2].Waits = "CUDA synchronize"
		}
	})
}

func TestAnalyse(t *testing.T) {
	// What a report must not say.
	absent := map[string][]string{
		"a background thread alone names nobody and says the evidence is weak": {"Ranks whose stacks differ"},
		"two against two is no majority":                                       {"Ranks whose stacks differ"},
		"silent ranks that wait are waiters":                                   {"[host]", "evidence is thin"},
		"a rank behind by the engine's sequence numbers":                       {"evidence is thin"},
	}
	for _, tc := range []struct {
		name     string
		world    int
		ranks    []Rank
		culprits []int
		text     []string
	}{
		{"all equal", 8, job(8, nil), nil, []string{"Likely culprit: none found", "8 ranks launched up to op 6650"}},
		{"ras phrasing", 32, job(32, func(i int, r *Rank) {
			if i >= 26 {
				r.Comms, r.Hang = comm(6649, 6649), nil
			}
		}), []int{26, 27, 28, 29, 30, 31}, []string{
			"26 ranks launched up to op 6650 (ranks 0-25), 6 ranks up to op 6649 (ranks 26-31)",
			"ranks 26-31 never issued AllReduce #6650 on comm 3f2a0b1c…, ranks 0-25 wait in it"}},
		{"one waiting", 2, job(2, func(i int, r *Rank) {
			if i == 1 {
				r.Comms, r.Hang = comm(6649, 6649), nil
			}
		}), []int{1}, []string{"rank 1 never issued AllReduce #6650 on comm 3f2a0b1c…, rank 0 waits in it"}},
		{"two levels behind", 8, job(8, func(i int, r *Rank) {
			switch i {
			case 1:
				r.Comms = comm(6648, 6648)
			case 2:
				r.Comms = comm(6649, 6648)
			}
		}), []int{1, 2}, []string{"rank 1 never issued AllReduce #6649", "rank 2 never issued AllReduce #6650"}},
		{"kernel while others wait behind a kernel", 8, job(8, func(i int, r *Rank) {
			r.Hang = gpuHang(&dumpfile.Op{Kind: "kernel", Kernel: "sgd_update_kernel", Stream: 1})
			if i == 3 {
				r.Hang = gpuHang(&dumpfile.Op{Kind: "kernel", Kernel: "flash_attn_bwd_kernel", Stream: 1})
			}
		}), []int{3}, []string{"rank 3 hangs in kernel flash_attn_bwd_kernel (stream 0x1, not a collective), while ranks 0-2/4-7 wait in kernel sgd_update_kernel"}},
		{"host hang", 4, job(4, func(i int, r *Rank) {
			if i == 0 {
				r.Hang = &dumpfile.Hang{Kind: "host", AgeNs: 305e9}
			}
		}), []int{0}, []string{"rank 0 made no GPU call for 305s"}},
		{"state D", 4, job(4, func(i int, r *Rank) {
			if i == 2 {
				r.State, r.Threads, r.Hang = "D (disk sleep)", nil, nil
			}
		}), []int{2}, []string{"Ranks in state D: 2"}},
		{"comm thread outlier beats watchdog noise", 8, job(8, func(i int, r *Rank) {
			if i == 4 {
				r.Threads[1].Stack, r.Threads[1].Where = 9, "poll_cq"
			}
			if i == 6 {
				r.Threads[2].Stack, r.Threads[2].Where = 8, "query"
			}
		}), []int{4}, []string{`[stack] rank 4's thread "gpu-stream2" is in poll_cq, while ranks 0-3/5-7 are in wait_peers`,
			`[background] rank 6's NCCL watchdog thread "pt_nccl_watchdg" is in query`}},
		{"a background thread alone names nobody and says the evidence is weak", 4, job(4, func(i int, r *Rank) {
			if i == 1 {
				r.Threads[2].Stack, r.Threads[2].Where = 8, "query"
			}
		}), nil, []string{"Likely culprit: none named, the evidence is weak: only background threads differ (rank 1)"}},
		{"the driving thread's Python stack names the rank, with its stall", 4, job(4, func(i int, r *Rank) {
			r.Threads[0].Role, r.Threads[0].Main, r.Threads[0].PyStack = Driver, true, 20
			r.Threads[0].Py, r.Threads[0].Wait = "backward (__init__.py:197) from step (job.py:269)", "c10d::Reducer::finalize_backward (libtorch_cpu.so)"
			r.Threads[1].Coll = false
			if i == 2 {
				r.Threads[0].Stack, r.Threads[0].PyStack = 7, 21
				r.Threads[0].Py, r.Threads[0].Wait = "stall_in_python_sleep (job.py:153)", "clock_nanosleep (libc.so.6)"
				// Its gloo worker also sits elsewhere: background, outranked.
				r.Threads[2].Stack = 9
			}
			if i == 1 {
				// A native application thread caught elsewhere ranks below Python.
				r.Threads[1].Stack = 10
			}
		}), []int{2}, []string{
			"rank 2's main thread is in stall_in_python_sleep (job.py:153), waiting in clock_nanosleep (libc.so.6), " +
				"while ranks 0-1/3 are in backward (__init__.py:197) from step (job.py:269), waiting in c10d::Reducer::finalize_backward (libtorch_cpu.so)",
			"[native] rank 1's thread \"gpu-stream2\""}},
		{"a busy driving thread runs", 4, job(4, func(i int, r *Rank) {
			r.Threads[0].Role, r.Threads[0].Main, r.Threads[0].PyStack, r.Threads[0].Py = Driver, true, 20, "backward (x.py:1)"
			if i == 3 {
				r.Threads[0].PyStack, r.Threads[0].Py, r.Threads[0].State, r.Threads[0].Wait = 21, "spin (job.py:159)", "R", ""
			}
		}), []int{3}, []string{"rank 3's main thread is in spin (job.py:159), running, while"}},
		{"two against two is no majority", 4, job(4, func(i int, r *Rank) {
			r.Threads[0].Role, r.Threads[0].PyStack = Driver, 20
			if i >= 2 {
				r.Threads[0].Stack, r.Threads[0].PyStack = 7, 21
			}
		}), nil, []string{"the evidence is weak: the ranks' stacks fall into 2 groups with no majority",
			"No majority: the largest group holds 2 of 4 ranks"}},
		{"noise alone blames nobody but says so", 8, job(8, func(i int, r *Rank) {
			if i%2 == 0 {
				r.Threads[2].Stack = 8
			}
		}), nil, []string{"Likely culprit: none found", "Groups of identical stacks"}},
		{"world comm ids disagree", 4, job(4, func(i int, r *Rank) {
			r.Comms = []dumpfile.CommState{{ID: []string{"aaaa1111bbbb", "cccc2222dddd", "aaaa1111bbbb", "eeee3333ffff"}[i], NRanks: 4, Issued: 12, Completed: 9, LastOp: "AllReduce"}}
			if i == 2 {
				r.Comms[0].Issued = 10
			}
		}), []int{2}, []string{"comm world (ids disagree between ranks: aaaa1111…, cccc2222…, eeee3333…)", "rank 2 never issued AllReduce #11"}},
		{"communicators whose init was not seen stay apart", 4, job(4, func(i int, r *Rank) {
			// Their sequence numbers count from whenever the probes began
			// seeing the rank: rank 1's lower count says nothing.
			r.Comms = []dumpfile.CommState{{ID: fmt.Sprintf("local:55%d0", i), Issued: 12, Completed: 9, LastOp: "AllReduce"}}
			if i == 1 {
				r.Comms[0].Issued, r.Comms[0].Completed = 9, 6
			}
		}), nil, []string{"comm local:5510: 0 ranks, 1 dumped", "Likely culprit: none found"}},
		{"native thread outlier beats Python noise", 4, job(4, func(i int, r *Rank) {
			r.Threads = append(r.Threads, Thread{TID: 4, Name: "gpu-stream1", Stack: 4, Where: "wait_event"})
			r.Threads[0].PyStack, r.Threads[2].PyStack = 10, 11
			if i == 2 {
				r.Threads[3].Stack, r.Threads[3].Where = 5, "flash_attn_bwd_kernel"
			}
			if i == 1 {
				r.Threads[2].Stack = 6
			}
		}), []int{2}, []string{`[native] rank 2's thread "gpu-stream1" is in flash_attn_bwd_kernel`}},
		{"missing rank", 4, job(4, nil)[1:], []int{0}, []string{"Ranks with no dump: 0", "missing ranks 0", "The evidence is thin"}},
		// The host rule needs evidence: silence alone on a rank whose
		// stack waits is a waiter's; the kernel past the timeout wins.
		{"silent ranks that wait are waiters", 4, glooKernel(4, 1, "host"), []int{1}, []string{
			"rank 1 hangs in kernel spin (stream 0x0, not a collective), while ranks 0/2-3 are not hung on GPU work and wait in gloo collective [a kernel outstanding 11s, past the 10s timeout]",
			"Waiting, not blamed: ranks 0/2-3, their stacks inside a gloo collective"}},
		// The engine today: the silent ranks are "stalled" (no sequence
		// numbers, no spinning); their stacks still say they wait.
		{"stalled ranks that wait are waiters", 4, glooKernel(4, 2, "stalled"), []int{2}, []string{
			"rank 2 hangs in kernel spin", "Waiting, not blamed: ranks 0-1/3, their stacks inside a gloo collective"}},
		// The H100 hang attached late (gpu-check's ddp4-agent): the probes
		// saw no op, rank 2 is decided on its gloo thread's CUDA wait seen
		// on its stack, ranks 0-1/3 stalled or not decided (dumped as
		// peers), their gloo threads in the collective.
		{"a GPU wait seen on the stack while the others wait in gloo", 4, job(4, func(i int, r *Rank) {
			r.Comms = nil
			r.Threads[2].Waits = "gloo collective"
			switch i {
			case 2:
				r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 10e9, Timeout: 10e9,
					StackWait: &dumpfile.StackWait{TID: 4157, Call: "cuStreamSynchronize", State: "R"}}
				r.Threads[2].Waits = "CUDA synchronize"
			case 3:
				r.Hang = &dumpfile.Hang{Kind: "stalled", AgeNs: 10e9, Timeout: 10e9}
			default:
				r.Hang = nil
			}
		}), []int{2}, []string{
			"rank 2 waits on the GPU in cuStreamSynchronize (thread 4157, seen on its stack), while ranks 0-1/3 are not hung on GPU work and wait in gloo collective [a GPU wait of 10s on its native stacks, past the 10s timeout]"}},
		// Attached after the hang under CUDA_LAUNCH_BLOCKING=1: rank 1's
		// main thread is blocked in the launch of the kernel that never
		// ends, named by the launch's stub frame.
		{"a blocked launch seen on the stack names its kernel", 4, job(4, func(i int, r *Rank) {
			r.Comms = nil
			r.Threads[2].Waits = "gloo collective"
			switch i {
			case 1:
				r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 10e9, Timeout: 10e9,
					StackWait: &dumpfile.StackWait{TID: 843, Call: "cuLaunchKernel", Kernel: "at::cuda::(anonymous namespace)::spin_kernel", State: "S"}}
				r.Threads[2].Waits = "CUDA launch"
			default:
				r.Hang = nil
			}
		}), []int{1}, []string{
			"rank 1 waits on the GPU in cuLaunchKernel of at::cuda::(anonymous namespace)::spin_kernel (thread 843, seen on its stack)"}},
		{"GPU waits seen on every rank's stack name nobody", 4, job(4, func(i int, r *Rank) {
			r.Comms = nil
			r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 10e9, Timeout: 10e9,
				StackWait: &dumpfile.StackWait{TID: 9, Call: "cuStreamSynchronize", State: "R"}}
		}), nil, []string{"Likely culprit: none"}},
		// A host decision carries the rank's oldest op; it is not what the
		// rank is stuck on.
		{"a host decision's oldest op is no kernel hang", 4, job(4, func(i int, r *Rank) {
			r.Comms = nil
			r.Hang = &dumpfile.Hang{Kind: "host", AgeNs: 11e9, Timeout: 10e9, Oldest: &dumpfile.Op{Kind: "kernel", Kernel: "leftover"}}
			r.Threads[2].Waits = "gloo collective"
			if i == 3 {
				r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 11e9, Timeout: 10e9, Oldest: &dumpfile.Op{Kind: "kernel", Kernel: "spin"}}
			}
		}), []int{3}, []string{"rank 3 hangs in kernel spin (stream 0x0, not a collective), while ranks 0-2 are not hung on GPU work and wait in gloo collective"}},
		// The kernel-hang fault on the realistic testbed: no host thread
		// runs the kernel; the peers' compute is known complete (their
		// collectives' start events were ready), the rank's is not. The
		// probes missed two ranks' communicator creation: the collective
		// is the same all the same.
		{"kernel outstanding while the peers wait in one collective known by several ids", 4, job(4, func(i int, r *Rank) {
			c := *coll
			c.Seq = 10
			if i >= 2 {
				c.Comm = fmt.Sprintf("local:0x5647e1007c%d0", i)
			}
			r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 3.7e9, Timeout: 3e9, Oldest: &c}
			if i == 1 {
				r.Hang.AgeNs, r.Hang.Oldest = 3.8e9, &dumpfile.Op{Kind: "kernel", Kernel: "triton_poi_fused_add_0"}
			}
		}), []int{1}, []string{"[kernel] rank 1 hangs in kernel triton_poi_fused_add_0 (stream 0x0, not a collective), while ranks 0/2-3 wait in AllReduce #10 on comms 3f2a0b1c…, local:0x5647e1007c20, local:0x5647e1007c30 [a kernel outstanding 4s, past the 3s timeout]"}},
		{"a kernel whose name lookup the probes missed is named by its handle", 4, job(4, func(i int, r *Rank) {
			r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 3.7e9, Timeout: 3e9, Oldest: coll}
			if i == 3 {
				r.Hang.Oldest = &dumpfile.Op{Kind: "kernel", Func: 0x167e5680}
			}
		}), []int{3}, []string{"[kernel] rank 3 hangs in kernel 0x167e5680 (stream 0x0, not a collective), while ranks 0-2 wait in AllReduce #6650 on comm 3f2a0b1c…"}},
		{"kernel outstanding while the peers wait in different collectives", 4, job(4, func(i int, r *Rank) {
			r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 12e9, Timeout: 10e9, Oldest: coll}
			switch i {
			case 0:
				r.Hang.Oldest = &dumpfile.Op{Kind: "collective", Op: "Broadcast", Seq: 2, Comm: "local:0x1"}
			case 2:
				r.Hang.Oldest = &dumpfile.Op{Kind: "memcpy", Stream: 7}
			}
		}), []int{2}, []string{"[kernel] rank 2 hangs in memcpy (stream 0x7, not a collective), while ranks 0-1/3 wait in collectives (AllReduce, Broadcast) [a memcpy outstanding 12s, past the 10s timeout]"}},
		// Where no watchdog saw a collective start, every rank's compute
		// is outstanding alike: the probes cannot tell the hung kernel
		// from the complete ones, and name nobody.
		{"every rank behind its own outstanding kernels", 4, job(4, func(i int, r *Rank) {
			r.Hang = &dumpfile.Hang{Kind: "gpu", AgeNs: 3.1e9, Timeout: 3e9, Oldest: &dumpfile.Op{Kind: "kernel", Kernel: "triton_poi_fused_add_0"}, Collective: coll}
		}), nil, []string{"Likely culprit: none found"}},
		// Communicators whose creation the probes missed: no sequence
		// numbers, but the peers are stuck in a collective and the rank
		// has nothing in flight.
		{"out of every collective while the peers are stuck in one", 4, job(4, func(i int, r *Rank) {
			if i == 1 {
				r.Hang = &dumpfile.Hang{Kind: "host", AgeNs: 12e9, Pending: 0}
			}
		}), []int{1}, []string{"[host] rank 1 made no GPU call for 12s while its peers wait (stuck on the host) [no GPU work in flight while peers are stuck in a collective]"}},
		{"silence alone is thin evidence", 4, job(4, func(i int, r *Rank) {
			r.Hang = gpuHang(&dumpfile.Op{Kind: "kernel", Kernel: "k"}) // the peers are stuck, not in a collective
			if i == 3 {
				r.Hang = &dumpfile.Hang{Kind: "host", AgeNs: 12e9}
			}
		}), []int{3}, []string{"[host] rank 3 made no GPU call for 12s while its peers wait (stuck on the host) [no GPU call, thin]",
			"The evidence is thin"}},
		{"a rank behind by the engine's sequence numbers", 4, job(4, func(i int, r *Rank) {
			if i == 3 {
				r.Hang = &dumpfile.Hang{Kind: "host", AgeNs: 12e9, Lagging: &dumpfile.Lag{Comm: coll.Comm, Issued: 6649, Awaited: 6650, PeerRank: 0}}
				r.Threads[2].Waits = "c10d wait" // sequence numbers outweigh the stack
			}
		}), []int{3}, []string{"rank 3 made no GPU call for 12s while its peers wait, behind on comm 3f2a0b1c…: rank 0 waits in collective #6650 there [sequence numbers: issued #6649, awaited #6650]"}},
		{"a spinning rank", 4, job(4, func(i int, r *Rank) {
			if i == 0 {
				r.Hang = &dumpfile.Hang{Kind: "host", AgeNs: 12e9, Stall: &dumpfile.Stall{Spinning: true}}
			}
		}), []int{0}, []string{"[host] rank 0 made no GPU call for 12s while its peers wait, and spins on the host [its main thread spinning in the same Python frames]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Analyse(tc.world, tc.ranks)
			text := r.Text()
			if !slices.Equal(r.Culprits, tc.culprits) {
				t.Errorf("culprits %v, want %v\n%s", r.Culprits, tc.culprits, text)
			}
			for _, want := range tc.text {
				if !strings.Contains(text, want) {
					t.Errorf("report lacks %q:\n%s", want, text)
				}
			}
			for _, bad := range absent[tc.name] {
				if strings.Contains(text, bad) {
					t.Errorf("report has %q:\n%s", bad, text)
				}
			}
		})
	}
}

func TestBrief(t *testing.T) {
	if got := Brief("pthread_cond_wait@@GLIBC_2.3.2@/lib/x86_64-linux-gnu/libc.so.6"); got != "pthread_cond_wait@@GLIBC_2.3.2@libc.so.6" {
		t.Errorf("Brief = %q", got)
	}
	if got := Short("3f2a0b1c9d8e7f60"); got != "3f2a0b1c…" {
		t.Errorf("Short = %q", got)
	}
}

// The threads of the ranks' helper processes (forked DataLoader workers)
// line up across ranks by name and order, whatever their pids: the one
// worker stuck elsewhere is named, and no rank has a thread the others
// "lack" only because its workers' pids differ.
func TestHelperProcessesAlign(t *testing.T) {
	ranks := job(4, func(i int, r *Rank) {
		for w := range 2 {
			pid := 1000 + 10*i + w
			stack, where := 10, "line (run.py:505)"
			if i == 1 && w == 1 {
				stack, where = 11, "read (run.py:470)"
			}
			r.Threads = append(r.Threads, Thread{TID: pid, Process: pid, Name: fmt.Sprintf("helper %d: pt_data_worker", pid),
				Stack: stack, PyStack: stack, Where: where})
		}
	})
	text := Analyse(4, ranks).Text()
	if strings.Contains(text, "lack") {
		t.Errorf("helpers reported as threads other ranks lack:\n%s", text)
	}
	if !strings.Contains(text, `rank 1's thread "helper 1011: pt_data_worker" is in read (run.py:470), while ranks 0/2-3 are in line (run.py:505)`) {
		t.Errorf("the stuck worker of rank 1 is not named:\n%s", text)
	}
}

// TestTextBounded fills every section of a report past its bound: the
// text stays under 100 lines, and no line carries a whole long rank set.
func TestTextBounded(t *testing.T) {
	const world = 100000
	every := func(step, from int) []int {
		var s []int
		for r := from; r < world; r += step {
			s = append(s, r)
		}
		return s
	}
	r := &Report{World: world, Files: world, Missing: every(7, 3), DState: every(11, 5), Culprits: every(2, 0),
		Stalls: map[int]string{}, Waiters: map[int]string{}, Majority: every(2, 1), Thin: true, Why: "why"}
	for i := range 40 {
		r.Stalls[2*i] = fmt.Sprintf("main thread is in f%d", i)
		r.Waiters[2*i+1] = fmt.Sprintf("wait %d", i%6)
		r.Findings = append(r.Findings, Finding{Kind: KindOdd, Ranks: every(3+i, i), Text: "each of ranks " + ranksWord(every(3+i, i)), Evidence: EvidenceStack})
		r.Comms = append(r.Comms, &Comm{ID: fmt.Sprint(i), NRanks: world, Members: every(1, 0),
			Issued: map[int]uint64{1: 5, 2: 6, 3: 7}, Completed: map[int]uint64{1: 4}})
		g := Group{Ranks: every(5+i, i)}
		for j := range 10 {
			g.Diff = append(g.Diff, fmt.Sprintf("thread %d", j))
		}
		r.Groups = append(r.Groups, g)
	}
	lines := strings.Split(strings.TrimSuffix(r.Text(), "\n"), "\n")
	t.Logf("%d lines", len(lines))
	if len(lines) >= 100 {
		t.Errorf("%d lines, want under 100:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if len(l) > 400 {
			t.Errorf("a line of %d bytes: %.120s…", len(l), l)
		}
	}
}
