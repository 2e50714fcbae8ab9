package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/ranks"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/timer"
)

// markerReadWait bounds how long a check waits for the marker file.
const markerReadWait = 500 * time.Millisecond

type markerState struct {
	token   string // this agent's Marker.Agent
	mod     time.Time
	size    int64
	bad     string // the last refusal logged, so a bad file is told once
	seen    map[string]bool
	written string // id of the marker this agent wrote last
}

func (a *Agent) token() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.markers.token == "" {
		a.markers.token = fmt.Sprintf("%s/%d/%d", a.o.Hostname, os.Getpid(), a.start.UnixNano())
		a.markers.seen = make(map[string]bool)
	}
	return a.markers.token
}

// writeMarker announces this node's hang to the other nodes.
func (a *Agent) writeMarker(hangs []timer.Hang) {
	tok := a.token()
	now := a.o.Now()
	m := dumpfile.Marker{Schema: dumpfile.MarkerSchema, Agent: tok, Job: a.o.JobName, Host: a.o.Hostname, Time: now, Timeline: a.o.TimelinePath,
		ID: fmt.Sprintf("%s/%d", tok, now.UnixNano())}
	for _, h := range hangs {
		id, ok := a.identity(h.PID)
		rank := h.Rank
		if ok {
			rank = id.Rank
		}
		m.Ranks = append(m.Ranks, rank)
		m.PIDs = append(m.PIDs, h.PID)
		m.Kinds = append(m.Kinds, dumpfile.HangKind(h.Kind))
		if o := awaited(h); o != nil && m.Op == "" && h.Kind == timer.HangGPU {
			m.Op = opName(o)
		}
	}
	a.mu.Lock()
	a.markers.written = m.ID
	a.markers.seen[m.ID] = true
	a.mu.Unlock()
	path, err := timeline.WriteMarker(a.o.TimelinePath, &m)
	if err != nil {
		a.mu.Lock()
		a.writeErrs++
		a.mu.Unlock()
		a.log.Error("write hang marker", "err", err)
		return
	}
	a.log.Info("hang marker written", "path", path)
}

// checkMarkers looks for another agent's marker newer than this agent's
// start and, once per marker, dumps every live rank not yet dumped.
func (a *Agent) checkMarkers(ctx context.Context) {
	tok := a.token()
	r := timeline.PollMarker(a.o.TimelinePath, a.o.JobName, markerReadWait)
	path := r.Path
	if errors.Is(r.Err, timeline.ErrMarkerWait) {
		a.log.Warn("marker read timed out; skipped this check", "path", path, "wait", markerReadWait)
		return
	}
	if r.Err != nil && errors.Is(r.Err, fs.ErrNotExist) {
		return
	}
	a.mu.Lock()
	same := r.Mod.Equal(a.markers.mod) && r.Size == a.markers.size && r.Err == nil
	a.markers.mod, a.markers.size = r.Mod, r.Size
	told := a.markers.bad == fmt.Sprint(r.Err)
	a.markers.bad = fmt.Sprint(r.Err)
	a.mu.Unlock()
	if r.Err != nil {
		if !told {
			a.log.Warn("ignoring marker", "path", path, "err", r.Err)
		}
		return
	}
	if same {
		return
	}
	m := r.Marker
	a.mu.Lock()
	seen := a.markers.seen[m.ID]
	a.markers.seen[m.ID] = true
	a.mu.Unlock()
	if seen || m.Agent == tok || m.Time.Before(a.start) {
		return
	}
	a.log.Warn("another node reported a hang; dumping local ranks", "from", m.Host, "ranks", m.Ranks, "marker", path)
	a.report(Report{Event: EventMarker, From: m.Host, Path: path, Op: m.Op})
	var todo []ranks.Member
	members := a.book.Ranks()
	a.mu.Lock()
	for _, p := range members {
		if a.episode[p.PID] == nil {
			todo = append(todo, p)
		}
	}
	a.mu.Unlock()
	a.dumpRanks(ctx, todo, a.why(dumpfile.ReasonMarker, nil))
}
