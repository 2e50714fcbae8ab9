package flight

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/xpu-timer/xpu-timer/collector/format/trace"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Meta describes the process whose events are written.
type Meta struct {
	PID, Rank, World int
	Now              int64          // monotonic ns at dump time: waits still open end here
	Threads          map[int]string // thread names by tid, when known
}

// Chrome converts recorded events of one process into a trace: launches,
// copies and collectives (with sequence numbers) as instants on the thread
// that issued them; blocking waits (enter to exit) and streaks of not-ready
// queries as complete events; ready queries and stream queries as
// completions. Waits still open at m.Now end there and carry
// "unfinished": true.
func Chrome(recs []Record, overwritten uint64, m Meta) *trace.File {
	f := &trace.File{DisplayTimeUnit: "ns", OtherData: map[string]any{
		"pid": m.PID, "rank": m.Rank, "world_size": m.World,
		"events": len(recs), "overwritten": overwritten, "clock": "CLOCK_MONOTONIC",
	}}
	add := func(e trace.Event) { f.TraceEvents = append(f.TraceEvents, e) }
	add(trace.Event{Name: "process_name", Ph: "M", PID: m.PID, Args: map[string]any{"name": fmt.Sprintf("rank %d (pid %d)", m.Rank, m.PID)}})
	add(trace.Event{Name: "process_sort_index", Ph: "M", PID: m.PID, Args: map[string]any{"sort_index": max(m.Rank, 0)}})

	type open struct {
		rec   Record
		polls int // not-ready queries in a streak
		last  int64
	}
	waits := map[int]*open{}  // tid -> blocking call in progress
	streak := map[int]*open{} // tid -> not-ready query streak
	tids := map[int]bool{}
	closeSpan := func(o *open, end int64, unfinished bool, name string) {
		d := us(end - o.rec.Time)
		args := map[string]any{"stream": hex(o.rec.Stream)}
		if o.rec.Handle != 0 {
			args["event"] = hex(o.rec.Handle)
		}
		if o.polls > 0 {
			args["polls"] = o.polls
		}
		if unfinished {
			args["unfinished"] = true
		}
		add(trace.Event{Name: name, Cat: "wait", Ph: "X", TS: us(o.rec.Time), Dur: &d, PID: m.PID, TID: o.rec.TID, Args: args})
	}
	endStreak := func(tid int) {
		if o := streak[tid]; o != nil {
			closeSpan(o, o.last, false, callName(o.rec.Event, true))
			delete(streak, tid)
		}
	}

	for _, r := range recs {
		ev := r.Event
		tids[ev.TID] = true
		if ev.Kind != timer.KindEventQuery {
			endStreak(ev.TID)
		}
		switch ev.Kind {
		case timer.KindLaunch, timer.KindGraphLaunch, timer.KindMemcpyAsync:
			args := map[string]any{"stream": hex(ev.Stream)}
			name := callName(ev, false)
			switch ev.Kind {
			case timer.KindLaunch:
				if ev.Kernel != "" {
					name = ev.Kernel
				} else {
					name = "kernel " + hex(ev.Func)
				}
				args["grid"] = ev.Grid
				args["block"] = ev.Block
			case timer.KindMemcpyAsync:
				args["bytes"] = ev.Bytes
			case timer.KindGraphLaunch:
				args["graph"] = hex(ev.Handle)
			}
			add(trace.Event{Name: name, Cat: "launch", Ph: "i", S: "t", TS: us(ev.Time), PID: m.PID, TID: ev.TID, Args: args})
		case timer.KindCollective:
			args := map[string]any{"stream": hex(ev.Stream), "comm": hex(ev.Comm), "seq": r.Seq,
				"count": ev.Count, "dtype": timer.DtypeName(ev.Dtype), "bytes": ev.Count * timer.DtypeSize(ev.Dtype)}
			if ev.Op == timer.OpBroadcast || ev.Op == timer.OpReduce || ev.Op == timer.OpSend || ev.Op == timer.OpRecv {
				args["peer"] = ev.Peer
			}
			add(trace.Event{Name: fmt.Sprintf("%s #%d", callName(ev, false), r.Seq), Cat: "collective", Ph: "i", S: "t", TS: us(ev.Time), PID: m.PID, TID: ev.TID, Args: args})
		case timer.KindCommInit:
			add(trace.Event{Name: callName(ev, false), Cat: "comm", Ph: "i", S: "t", TS: us(ev.Time), PID: m.PID, TID: ev.TID,
				Args: map[string]any{"comm": hex(ev.Comm), "id": timer.CommIDString(ev.CommID), "rank": ev.Rank, "nranks": ev.NRanks}})
		case timer.KindEventRecord, timer.KindStreamWaitEvent, timer.KindCommDestroy, timer.KindGroupStart, timer.KindGroupEnd, timer.KindEventElapsed:
			args := map[string]any{"stream": hex(ev.Stream)}
			if ev.Handle != 0 {
				args["event"] = hex(ev.Handle)
			}
			if ev.Kind == timer.KindEventElapsed {
				args["ms"] = ev.ElapsedMs
			}
			add(trace.Event{Name: callName(ev, false), Cat: "api", Ph: "i", S: "t", TS: us(ev.Time), PID: m.PID, TID: ev.TID, Args: args})
		case timer.KindEventQuery, timer.KindStreamQuery:
			if ev.Ret == timer.RetNotReady && ev.Kind == timer.KindEventQuery {
				o := streak[ev.TID]
				if o != nil && o.rec.Handle != ev.Handle {
					endStreak(ev.TID)
					o = nil
				}
				if o == nil {
					o = &open{rec: r}
					streak[ev.TID] = o
				}
				o.polls++
				o.last = ev.Time
				continue
			}
			endStreak(ev.TID)
			args := map[string]any{"stream": hex(ev.Stream), "ret": ev.Ret}
			if ev.Handle != 0 {
				args["event"] = hex(ev.Handle)
			}
			cat := "completion"
			if ev.Ret != 0 {
				cat = "api"
			}
			add(trace.Event{Name: callName(ev, false), Cat: cat, Ph: "i", S: "t", TS: us(ev.Time), PID: m.PID, TID: ev.TID, Args: args})
		case timer.KindMemcpy, timer.KindEventSynchronize, timer.KindStreamSynchronize, timer.KindDeviceSynchronize, timer.KindCall:
			if ev.Phase == timer.PhaseEnter {
				waits[ev.TID] = &open{rec: r}
				continue
			}
			if o := waits[ev.TID]; o != nil {
				closeSpan(o, ev.Time, false, callName(o.rec.Event, false))
				delete(waits, ev.TID)
				if ev.Kind != timer.KindCall { // a free, a module load: it completes no GPU work the probes know
					add(trace.Event{Name: "complete", Cat: "completion", Ph: "i", S: "t", TS: us(ev.Time), PID: m.PID, TID: ev.TID,
						Args: map[string]any{"stream": hex(ev.Stream), "ret": ev.Ret, "call": callName(ev, false)}})
				}
			}
		case timer.KindProcessExec:
			add(trace.Event{Name: "exec", Cat: "process", Ph: "i", S: "t", TS: us(ev.Time), PID: m.PID, TID: ev.TID})
		}
	}
	end := m.Now
	for _, tid := range sortedKeys(waits) {
		o := waits[tid]
		closeSpan(o, max(end, o.rec.Time), true, callName(o.rec.Event, false))
	}
	for _, tid := range sortedKeys(streak) {
		o := streak[tid]
		closeSpan(o, max(end, o.last), true, callName(o.rec.Event, true))
	}
	for _, tid := range sortedKeys(tids) {
		name := m.Threads[tid]
		if name == "" {
			name = "tid " + strconv.Itoa(tid)
		}
		add(trace.Event{Name: "thread_name", Ph: "M", PID: m.PID, TID: tid, Args: map[string]any{"name": name}})
	}
	return f
}

// WriteChrome writes the trace of recs as JSON to w.
func WriteChrome(w io.Writer, recs []Record, overwritten uint64, m Meta) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(Chrome(recs, overwritten, m)); err != nil {
		return fmt.Errorf("encode trace of pid %d: %w", m.PID, err)
	}
	return nil
}

func sortedKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// callName spells the API call of ev the vendor's way.
func callName(ev timer.Event, polling bool) string {
	if polling {
		return ev.Call() + " (polling)"
	}
	return ev.Call()
}
