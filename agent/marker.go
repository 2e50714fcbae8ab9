package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/timer"
)

// MarkerSchema names the marker format.
const MarkerSchema = "xpu-timer.marker/1"

// ErrBadMarker reports a marker file that is not one of ours.
var ErrBadMarker = errors.New("not an xpu-timer hang marker")

// Marker is the file an agent writes beside its dumps when a rank of its
// node hangs: hang-<job>.marker. Agents of the same job on other nodes that
// share the timeline directory see a marker newer than their own start and
// dump their ranks once (reason "marker"), so a rank stuck on a quiet node
// is not missed.
type Marker struct {
	Schema   string    `json:"schema"`
	ID       string    `json:"id"`    // unique per hang episode
	Agent    string    `json:"agent"` // host/pid/start of the writing agent
	Job      string    `json:"job"`
	Host     string    `json:"host"`
	Time     time.Time `json:"time"`
	Ranks    []int     `json:"ranks"` // ranks that hung
	PIDs     []int     `json:"pids"`
	Kinds    []string  `json:"kinds"` // their decision kinds
	Op       string    `json:"op,omitempty"`
	Timeline string    `json:"timeline"`
}

// MarkerName is the marker file name of a job ("default" when unnamed).
func MarkerName(job string) string {
	if job == "" {
		job = "default"
	}
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, job)
	return "hang-" + clean + ".marker"
}

// ParseMarker decodes and checks a marker file's content.
func ParseMarker(b []byte) (*Marker, error) {
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode marker: %w: %w", ErrBadMarker, err)
	}
	if m.Schema != MarkerSchema || m.ID == "" || m.Time.IsZero() {
		return nil, fmt.Errorf("marker schema %q id %q: %w", m.Schema, m.ID, ErrBadMarker)
	}
	return &m, nil
}

type markerState struct {
	token   string // this agent's Marker.Agent
	mod     time.Time
	size    int64
	seen    map[string]bool
	written string // id of the marker this agent wrote last
}

func (a *Agent) markerPath() string {
	return filepath.Join(a.o.TimelinePath, MarkerName(a.o.JobName))
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
	m := Marker{Schema: MarkerSchema, Agent: tok, Job: a.o.JobName, Host: a.o.Hostname, Time: now, Timeline: a.o.TimelinePath,
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
	m, err := ParseMarker(b)
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
			return ReasonHang, &h
		}
		return ReasonMarker, nil
	})
}
