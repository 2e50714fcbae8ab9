package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/ranks/identity"
	"github.com/xpu-timer/xpu-timer/timer"
)

// A collective hang names the collective the waiters are blocked behind,
// not the kernel queued before it that was never seen to complete; the
// kernel keeps its own field.
func TestHangReportNamesAwaitedCollective(t *testing.T) {
	kernel := &timer.Op{Kind: "kernel", Kernel: "layernorm_fwd_kernel", Stream: 0}
	coll := &timer.Op{Kind: "collective", Op: "AllReduce", Dtype: "bfloat16", Comm: "676000a3", Seq: 10, Stream: 0x7f00, Bytes: 50 << 20}
	for _, tc := range []struct {
		name     string
		h        timer.Hang
		op       string
		opKind   timer.OpKind
		oldestOp string
		comm     string
		seq      uint64
	}{
		{"collective behind a kernel", timer.Hang{Kind: "gpu", Rank: 2, Oldest: kernel, Collective: coll},
			"AllReduce", "collective", "layernorm_fwd_kernel", "676000a3", 10},
		{"kernel alone", timer.Hang{Kind: "gpu", Rank: 2, Oldest: kernel},
			"layernorm_fwd_kernel", "kernel", "layernorm_fwd_kernel", "", 0},
		{"collective oldest", timer.Hang{Kind: "gpu", Rank: 2, Oldest: coll, Collective: coll},
			"AllReduce", "collective", "AllReduce", "676000a3", 10},
		{"memcpy", timer.Hang{Kind: "gpu", Rank: 2, Oldest: &timer.Op{Kind: "memcpy", Bytes: 4}},
			"memcpy", "memcpy", "memcpy", "", 0},
		{"host stall owes a collective", timer.Hang{Kind: "host", Rank: 2, Oldest: kernel,
			Lagging: &timer.Lag{Comm: "676000a3", Issued: 9, Awaited: 10, PeerPID: 7},
			Comms:   []timer.CommState{{ID: "other", LastOp: "AllGather"}, {ID: "676000a3", Issued: 9, LastOp: "AllReduce"}}},
			"AllReduce", "collective", "layernorm_fwd_kernel", "676000a3", 10},
		{"host stall, peers unknown", timer.Hang{Kind: "host", Rank: 2, Oldest: kernel},
			"", "", "layernorm_fwd_kernel", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := hangReport(tc.h, identity.Identity{}, false)
			if r.Op != tc.op || r.OpKind != tc.opKind || r.OldestOp != tc.oldestOp || r.Comm != tc.comm || r.Seq != tc.seq {
				t.Fatalf("op %q kind %q oldest_op %q comm %q seq %d; want %q %q %q %q %d",
					r.Op, r.OpKind, r.OldestOp, r.Comm, r.Seq, tc.op, tc.opKind, tc.oldestOp, tc.comm, tc.seq)
			}
			if tc.h.Collective != nil && (r.Dtype != "bfloat16" || r.Stream != 0x7f00 || r.Bytes != 50<<20 || r.Collective != coll) {
				t.Fatalf("collective fields %+v", r)
			}
			if r.Rank == nil || *r.Rank != 2 || r.rank() != 2 {
				t.Fatalf("rank %v", r.rank())
			}
		})
	}
	if got := (Report{}).rank(); got != "unknown" {
		t.Fatalf("unknown rank logged as %v", got)
	}
}

// The hang log line carries the rank's number, not a pointer.
func TestHangLogLineRank(t *testing.T) {
	var logs bytes.Buffer
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	work(b.Agent, 100, 1*sec, true)
	work(b.Agent, 101, 1*sec, false)
	work(b.Agent, 100, 3*sec, true)
	b.at(3*sec + 10)
	b.Tick(context.Background())
	var line string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "msg=hang") {
			line = l
		}
	}
	if !strings.Contains(line, " rank=1 ") || strings.Contains(line, "rank=0x") {
		t.Fatalf("hang log line %q", line)
	}
}

// What a dump lacks is logged, a line each: an interpreter whose frames
// were not read says so.
func TestDumpLogsWhatItLacks(t *testing.T) {
	var logs bytes.Buffer
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	const note = "Python 3.16.0a1: frames not read: unknown layout"
	b.capture.errors = map[int][]string{101: {note}}
	work(b.Agent, 100, 1*sec, true)
	work(b.Agent, 101, 1*sec, false)
	work(b.Agent, 100, 3*sec, true)
	b.at(3*sec + 10)
	b.Tick(context.Background())
	var lines []string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "msg=\"dump incomplete\"") {
			lines = append(lines, l)
		}
	}
	if b.capture.count(101) == 0 || len(lines) != 1 || !strings.Contains(lines[0], " rank=1 pid=101 ") || !strings.Contains(lines[0], `error="`+note+`"`) {
		t.Fatalf("%d captures of rank 1; lines %q", b.capture.count(101), lines)
	}
}

// A rank silent on the host is reported with the collective its waiting
// peer is stuck in, the one it has not issued.
func TestHostStallNamesOwedCollective(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}, nil)
	var id [16]byte
	id[0] = 0x42
	for i, pid := range []int{100, 101} {
		b.HandleEvent(timer.Event{Time: 1 * sec, PID: pid, TID: pid, Kind: timer.KindCommInit, Phase: timer.PhaseExit,
			Comm: uint64(0xa0 + i), Rank: int32(i), NRanks: 2, CommID: id})
	}
	coll := func(at int64, pid int) {
		b.HandleEvent(timer.Event{Time: at, PID: pid, TID: pid, Kind: timer.KindCollective, Op: timer.OpAllReduce, Count: 1024, Dtype: 9,
			Comm: uint64(0xa0 + pid - 100), Stream: 5, Peer: -1})
	}
	coll(2*sec, 100)
	coll(2*sec, 101)
	for _, pid := range []int{100, 101} {
		b.HandleEvent(timer.Event{Time: 2*sec + 1, PID: pid, TID: pid, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseEnter, Stream: 5})
		b.HandleEvent(timer.Event{Time: 2*sec + 2, PID: pid, TID: pid, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseExit, Stream: 5})
	}
	// Rank 0 issues #2 and waits; rank 1 goes silent.
	coll(3*sec, 100)
	b.HandleEvent(timer.Event{Time: 3*sec + 1, PID: 100, TID: 100, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseEnter, Stream: 5})
	b.at(10 * sec)
	b.Tick(context.Background())
	var host *Report
	for _, r := range b.events("hang") {
		if r.Kind == "host" {
			host = &r
		}
	}
	if host == nil {
		t.Fatalf("no host hang: %+v", b.events("hang"))
	}
	if *host.Rank != 1 || host.Op != "AllReduce" || host.OpKind != "collective" || host.Seq != 2 || host.Dtype != "bfloat16" || host.Comm == "" {
		t.Fatalf("host hang %+v", *host)
	}
}

// A decision over several awaited ops names the newest too (the stuck op
// is one from the oldest to it); over one, the oldest alone.
func TestHangReportNewest(t *testing.T) {
	fill := &timer.Op{Kind: "kernel", Kernel: "vectorized_elementwise_kernel"}
	spin := &timer.Op{Kind: "kernel", Kernel: "spin_on_flag"}
	r := hangReport(timer.Hang{Kind: "gpu", Rank: 0, Oldest: fill, Newest: spin, Awaited: 2}, identity.Identity{}, false)
	if r.Op != "vectorized_elementwise_kernel" || r.NewestOp != "spin_on_flag" || r.Newest != spin || r.Awaited != 2 {
		t.Fatalf("op %q newest_op %q newest %v awaited %d", r.Op, r.NewestOp, r.Newest, r.Awaited)
	}
	r = hangReport(timer.Hang{Kind: "gpu", Rank: 0, Oldest: spin, Awaited: 1}, identity.Identity{}, false)
	if r.Op != "spin_on_flag" || r.NewestOp != "" || r.Awaited != 1 {
		t.Fatalf("one op: op %q newest_op %q awaited %d", r.Op, r.NewestOp, r.Awaited)
	}
}
