package dumpfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Why a rank was dumped (File.Reason).
const (
	ReasonHang   = "hang"   // this rank hung
	ReasonPeer   = "peer"   // another rank of the job on this node hung
	ReasonMarker = "marker" // another node's agent reported a hang (its Marker)
	ReasonManual = "manual" // a person asked: xpu-timer dump
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
