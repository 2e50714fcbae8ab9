package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/timer"
)

type markerState struct {
	token   string // this agent's Marker.Agent
	mod     time.Time
	size    int64
	seen    map[string]bool
	written string // id of the marker this agent wrote last
}

func (a *Agent) markerPath() string {
	return filepath.Join(a.o.TimelinePath, dumpfile.MarkerName(a.o.JobName))
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
		m.Kinds = append(m.Kinds, h.Kind)
		if o := awaited(h); o != nil && m.Op == "" && h.Kind == "gpu" {
			m.Op = opName(o)
		}
	}
	b, _ := json.MarshalIndent(m, "", " ")
	a.mu.Lock()
	a.markers.written = m.ID
	a.markers.seen[m.ID] = true
	a.mu.Unlock()
	if err := dumpfile.WriteAtomic(a.markerPath(), append(b, '\n')); err != nil {
		a.mu.Lock()
		a.writeErrs++
		a.mu.Unlock()
		a.log.Error("write hang marker", "err", err)
		return
	}
	a.log.Info("hang marker written", "path", a.markerPath())
}

// checkMarkers looks for another agent's marker newer than this agent's
// start and, once per marker, dumps every live rank not yet dumped.
func (a *Agent) checkMarkers(ctx context.Context) {
	tok := a.token()
	path := a.markerPath()
	st, err := os.Stat(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Debug("stat marker", "err", err)
		}
		return
	}
	a.mu.Lock()
	same := st.ModTime().Equal(a.markers.mod) && st.Size() == a.markers.size
	a.markers.mod, a.markers.size = st.ModTime(), st.Size()
	a.mu.Unlock()
	if same {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	m, err := dumpfile.ParseMarker(b)
	if err != nil {
		a.log.Warn("ignoring marker", "path", path, "err", err)
		return
	}
	a.mu.Lock()
	seen := a.markers.seen[m.ID]
	a.markers.seen[m.ID] = true
	a.mu.Unlock()
	if seen || m.Agent == tok || m.Time.Before(a.start) {
		return
	}
	a.log.Warn("another node reported a hang; dumping local ranks", "from", m.Host, "ranks", m.Ranks, "marker", path)
	a.report(Report{Event: "marker", From: m.Host, Path: path, Op: m.Op})
	var todo []procInfo
	ranks := a.ranks()
	a.mu.Lock()
	for _, p := range ranks {
		if a.episode[p.pid] == nil {
			todo = append(todo, p)
		}
	}
	a.mu.Unlock()
	a.dumpRanks(ctx, todo, func(pid int) (string, *timer.Hang) {
		if h, ok := a.engine.Hung(pid); ok {
			return dumpfile.ReasonHang, &h
		}
		return dumpfile.ReasonMarker, nil
	})
}
