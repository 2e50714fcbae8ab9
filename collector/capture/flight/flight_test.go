package flight

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/xpu-timer/xpu-timer/timer"
)

func TestRingKeepsLast(t *testing.T) {
	r := New(4)
	for i := 1; i <= 10; i++ {
		r.Add(timer.Event{Time: int64(i), PID: 7, TID: 7, Kind: timer.KindLaunch})
	}
	recs, over := r.Events(7)
	if len(recs) != 4 || over != 6 {
		t.Fatalf("got %d events, %d overwritten; want 4, 6", len(recs), over)
	}
	for i, rec := range recs {
		if rec.Time != int64(7+i) {
			t.Fatalf("event %d has time %d, want %d (oldest first)", i, rec.Time, 7+i)
		}
	}
	r.Add(timer.Event{PID: 7, Kind: timer.KindProcessExit})
	if recs, _ := r.Events(7); recs != nil {
		t.Fatalf("exit did not forget the process: %d events", len(recs))
	}
}

func TestBoundedProcesses(t *testing.T) {
	r := New(2)
	r.maxProcs = 3
	for pid := 1; pid <= 5; pid++ {
		r.Add(timer.Event{PID: pid, Kind: timer.KindLaunch})
	}
	if got := len(r.Processes()); got != 3 {
		t.Fatalf("%d processes kept, want 3", got)
	}
	if r.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", r.Dropped())
	}
}

func TestSequenceNumbers(t *testing.T) {
	r := New(16)
	for _, comm := range []uint64{0xa, 0xa, 0xb, 0xa} {
		r.Add(timer.Event{PID: 1, TID: 1, Kind: timer.KindCollective, Comm: comm, Op: timer.OpAllReduce})
	}
	recs, _ := r.Events(1)
	var got []uint64
	for _, rec := range recs {
		got = append(got, rec.Seq)
	}
	if want := []uint64{1, 2, 1, 3}; !equal(got, want) {
		t.Fatalf("seqs %v, want %v", got, want)
	}
}

// TestAddAllAsAdd feeds one stream of events to a recorder one by one
// and to another as batches: interleaved processes, collectives on two
// communicators, an exec, exits (one of a process that comes back), more
// processes than kept, rings that wrap. Both must hold the same.
func TestAddAllAsAdd(t *testing.T) {
	var evs []timer.Event
	for i := range 400 {
		pid := 1 + i%3
		if i%7 == 0 {
			pid = 4 + i%5 // beyond maxProcs, some of them
		}
		ev := timer.Event{Time: int64(i), PID: pid, TID: pid, Kind: timer.KindLaunch}
		switch {
		case i%11 == 0:
			ev.Kind, ev.Comm, ev.Op = timer.KindCollective, uint64(0xa+i%2), timer.OpAllReduce
		case i%53 == 0:
			ev.Kind = timer.KindProcessExec
		case i%37 == 0:
			ev.Kind = timer.KindProcessExit
		}
		evs = append(evs, ev)
	}
	one, all := New(8), New(8)
	one.maxProcs, all.maxProcs = 4, 4
	for _, ev := range evs {
		one.Add(ev)
	}
	for i := 0; i < len(evs); i += 13 {
		all.AddAll(slices.Clone(evs[i:min(i+13, len(evs))]))
	}
	if !slices.Equal(one.Processes(), all.Processes()) || one.Dropped() != all.Dropped() {
		t.Fatalf("processes %v (dropped %d) one by one, %v (dropped %d) in batches", one.Processes(), one.Dropped(), all.Processes(), all.Dropped())
	}
	for _, pid := range one.Processes() {
		a, an := one.Events(pid)
		b, bn := all.Events(pid)
		if !slices.Equal(a, b) || an != bn {
			t.Fatalf("pid %d: one by one %v (%d overwritten), in batches %v (%d)", pid, a, an, b, bn)
		}
	}
	if len(one.Processes()) == 0 {
		t.Fatal("nothing recorded")
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestChromeJSON checks the structure Perfetto needs: a traceEvents array,
// every event with name, ph, numeric ts, pid and tid; complete events with
// a non-negative dur; instants with a scope; metadata naming the process
// and every thread; waits as complete events; open waits ending at Now.
func TestChromeJSON(t *testing.T) {
	const ms = int64(1e6)
	r := New(0)
	evs := []timer.Event{
		{Time: 1 * ms, TID: 10, Kind: timer.KindCommInit, Comm: 0xc0, NRanks: 4, Rank: 2},
		{Time: 2 * ms, TID: 10, Kind: timer.KindLaunch, Kernel: "gemm_bf16_kernel", Stream: 5, Grid: [3]uint32{8, 1, 1}, Block: [3]uint32{256, 1, 1}},
		{Time: 3 * ms, TID: 10, Kind: timer.KindCollective, Op: timer.OpAllReduce, Comm: 0xc0, Stream: 5, Count: 1024, Dtype: 9},
		{Time: 4 * ms, TID: 10, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseEnter, Stream: 5},
		{Time: 9 * ms, TID: 10, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseExit, Stream: 5},
		{Time: 10 * ms, TID: 11, Kind: timer.KindEventRecord, Handle: 0xe1, Stream: 5},
		{Time: 11 * ms, TID: 10, Kind: timer.KindCollective, Op: timer.OpAllReduce, Comm: 0xc0, Stream: 5, Count: 1024, Dtype: 9},
		{Time: 12 * ms, TID: 11, Kind: timer.KindEventQuery, Handle: 0xe1, Ret: timer.RetNotReady},
		{Time: 13 * ms, TID: 11, Kind: timer.KindEventQuery, Handle: 0xe1, Ret: timer.RetNotReady},
		{Time: 14 * ms, TID: 11, Kind: timer.KindEventQuery, Handle: 0xe1, Ret: timer.RetNotReady},
		{Time: 15 * ms, TID: 10, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseEnter, Stream: 5, Vendor: timer.VendorMACA},
	}
	for _, ev := range evs {
		ev.PID = 42
		r.Add(ev)
	}
	recs, over := r.Events(42)
	var buf bytes.Buffer
	if err := WriteChrome(&buf, recs, over, Meta{PID: 42, Rank: 2, World: 4, Now: 20 * ms, Threads: map[int]string{10: "python3"}}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if len(doc.TraceEvents) == 0 {
		t.Fatal("no traceEvents")
	}
	names := map[string]map[string]any{}
	threads := map[string]bool{}
	for i, e := range doc.TraceEvents {
		for _, k := range []string{"name", "ph", "pid"} {
			if _, ok := e[k]; !ok {
				t.Fatalf("event %d lacks %q: %v", i, k, e)
			}
		}
		ph := e["ph"].(string)
		if ph != "M" {
			if _, err := e["ts"].(json.Number).Float64(); err != nil {
				t.Fatalf("event %d: ts %v", i, e["ts"])
			}
			if _, ok := e["tid"]; !ok {
				t.Fatalf("event %d lacks tid", i)
			}
		}
		switch ph {
		case "X":
			d, err := e["dur"].(json.Number).Float64()
			if err != nil || d < 0 {
				t.Fatalf("event %d: dur %v", i, e["dur"])
			}
		case "i":
			if e["s"] != "t" {
				t.Fatalf("instant %d without thread scope", i)
			}
		case "M":
			if e["name"] == "thread_name" {
				threads[e["args"].(map[string]any)["name"].(string)] = true
			}
		default:
			t.Fatalf("event %d: unexpected ph %q", i, ph)
		}
		names[e["name"].(string)+"/"+ph] = e
	}
	for _, want := range []string{"process_name/M", "gemm_bf16_kernel/i", "ncclAllReduce #1/i", "ncclAllReduce #2/i",
		"cuStreamSynchronize/X", "cuEventQuery (polling)/X", "mcStreamSynchronize/X", "ncclCommInitRank/i", "complete/i"} {
		if names[want] == nil {
			t.Errorf("no %s event", want)
		}
	}
	if !threads["python3"] || !threads["tid 11"] {
		t.Errorf("thread names %v", threads)
	}
	sync := names["cuStreamSynchronize/X"]
	if d, _ := sync["dur"].(json.Number).Float64(); d != 5000 {
		t.Errorf("finished wait lasts %v µs, want 5000", d)
	}
	open := names["mcStreamSynchronize/X"]
	if d, _ := open["dur"].(json.Number).Float64(); d != 5000 || open["args"].(map[string]any)["unfinished"] != true {
		t.Errorf("open wait %v, want 5000 µs unfinished", open)
	}
	poll := names["cuEventQuery (polling)/X"]
	if p := poll["args"].(map[string]any)["polls"]; p.(json.Number).String() != "3" {
		t.Errorf("poll streak counted %v polls, want 3", p)
	}
	if seq := names["ncclAllReduce #2/i"]["args"].(map[string]any)["seq"]; seq.(json.Number).String() != "2" {
		t.Errorf("second collective seq %v", seq)
	}
}

func BenchmarkAdd(b *testing.B) {
	r := New(0)
	ev := timer.Event{PID: 1, TID: 1, Kind: timer.KindLaunch, Kernel: "k"}
	for i := 0; i < b.N; i++ {
		ev.Time = int64(i)
		r.Add(ev)
	}
}

// launch is a launch as the tracer decodes it (Peer -1).
func launch(pid int, t int64) timer.Event {
	return timer.Event{Time: t, PID: pid, TID: pid + 1, Kind: timer.KindLaunch, Vendor: timer.VendorMACA, Stream: 0x5,
		Func: 0x7f00 + uint64(t), Kernel: "gemm", Grid: [3]uint32{80, 2, 3}, Block: [3]uint32{256, 4, 1}, Shmem: 4096, Peer: -1}
}

// TestEveryFieldComesBack sets each field of a launch in turn to a value
// a launch does not carry (every field of timer.Event, so a field added
// later is covered): each event reads back whole, packed or not, and a
// launch as the tracer decodes it is packed.
func TestEveryFieldComesBack(t *testing.T) {
	if n := unsafe.Sizeof(slot{}); n != 80 {
		t.Errorf("a slot is %d bytes, want 80 (the recorder's memory: 4096 a rank)", n)
	}
	base := launch(7, 100)
	r := New(4)
	r.Add(base)
	if g := r.procs[7]; g.slots[0].kind != timer.KindLaunch {
		t.Fatal("a decoded launch was not packed")
	}
	if recs, _ := r.Events(7); len(recs) != 1 || recs[0] != (Record{Event: base}) {
		t.Fatalf("read back %+v, want %+v", recs, base)
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "PID" {
			continue // the ring's
		}
		for _, v := range []int64{0, 1, -1, 300, 1 << 40} {
			ev := base
			fv := reflect.ValueOf(&ev).Elem().Field(i)
			switch fv.Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				if fv.OverflowInt(v) {
					continue
				}
				fv.SetInt(v)
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				if v < 0 || fv.OverflowUint(uint64(v)) {
					continue
				}
				fv.SetUint(uint64(v))
			case reflect.Float32:
				fv.SetFloat(float64(v) + 0.5)
			case reflect.String:
				fv.SetString(fmt.Sprint("s", v))
			case reflect.Array:
				fv.Index(fv.Len() - 1).Set(reflect.ValueOf(uint64(v)).Convert(fv.Type().Elem()))
			default:
				t.Fatalf("field %s of kind %v: teach this test its values", f.Name, fv.Kind())
			}
			r := New(4)
			r.Add(launch(7, 1)) // a packed neighbour
			r.Add(ev)
			recs, _ := r.Events(7)
			if len(recs) != 2 || recs[1].Event != ev {
				t.Errorf("%s = %v: read back %+v, want %+v", f.Name, v, recs[len(recs)-1].Event, ev)
			}
		}
	}
	neg := base
	neg.ElapsedMs = float32(math.Copysign(0, -1))
	r = New(4)
	r.Add(neg)
	if recs, _ := r.Events(7); math.Float32bits(recs[0].ElapsedMs) != math.Float32bits(neg.ElapsedMs) {
		t.Errorf("ElapsedMs -0 read back as %v", recs[0].ElapsedMs)
	}
}

// TestRingHoldsTheLastEvents adds launches, collectives on two
// communicators, execs and other calls of interleaved processes to
// recorders of several sizes and checks, after every event, that each
// process's events read back as the last ones it added, oldest first,
// with their sequence numbers.
func TestRingHoldsTheLastEvents(t *testing.T) {
	for _, capacity := range []int{1, 3, 16, 40} {
		r := New(capacity)
		want := map[int][]Record{}
		seqs := map[int]map[uint64]uint64{}
		total := map[int]int{}
		for i := range 600 {
			pid := 1 + i%3
			if i%5 == 0 {
				pid = 1 // one process makes most
			}
			ev := launch(pid, int64(i))
			rec := Record{}
			switch {
			case i%9 == 0:
				ev = timer.Event{Time: int64(i), PID: pid, TID: pid, Kind: timer.KindCollective, Comm: uint64(0xa + i%2), Op: timer.OpAllReduce, Count: uint64(i), Peer: -1}
				if seqs[pid] == nil {
					seqs[pid] = map[uint64]uint64{}
				}
				seqs[pid][ev.Comm]++
				rec.Seq = seqs[pid][ev.Comm]
			case i%61 == 0:
				ev = timer.Event{Time: int64(i), PID: pid, TID: pid, Kind: timer.KindProcessExec}
				clear(seqs[pid])
			case i%7 == 0 || (i/40)%3 == 1: // bursts of calls
				ev = timer.Event{Time: int64(i), PID: pid, TID: pid, Kind: timer.KindEventQuery, Handle: uint64(i), Ret: timer.RetNotReady, Peer: -1}
			}
			rec.Event = ev
			r.Add(ev)
			w := append(want[pid], rec)
			want[pid] = w[max(0, len(w)-capacity):]
			total[pid]++
			got, over := r.Events(pid)
			if !slices.Equal(got, want[pid]) || int(over) != total[pid]-len(want[pid]) {
				t.Fatalf("capacity %d, event %d: pid %d holds %+v (%d overwritten), want %+v (%d)", capacity, i, pid, got, over, want[pid], total[pid]-len(want[pid]))
			}
			if g := r.procs[pid]; g != nil {
				wide := 0
				for _, rec := range want[pid] {
					if rec.Kind != timer.KindLaunch {
						wide++
					}
				}
				if g.wide.n != wide || len(g.wide.buf) > max(16, 2*capacity) {
					t.Fatalf("capacity %d, event %d: pid %d keeps %d whole records in %d, want %d", capacity, i, pid, g.wide.n, len(g.wide.buf), wide)
				}
			}
		}
	}
}

// BenchmarkAddAll adds batches of events of 8 launch-bound processes, as
// the tracer delivers them (launches decoded, a collective now and then):
// ns an event, the rings of all 8 written in turn.
func BenchmarkAddAll(b *testing.B) {
	r := New(0)
	batch := make([]timer.Event, 512)
	for i := range batch {
		batch[i] = launch(1000+i%8, int64(i))
		if i%64 == 0 {
			batch[i] = timer.Event{PID: 1000 + i%8, TID: 1, Kind: timer.KindCollective, Comm: 0xc0, Op: timer.OpAllReduce, Peer: -1}
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		r.AddAll(batch)
	}
}
