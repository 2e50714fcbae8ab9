package dumpfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

// Reason says why a rank was dumped (File.Reason).
type Reason string

// Reasons.
const (
	ReasonHang   Reason = "hang"   // this rank hung
	ReasonPeer   Reason = "peer"   // another rank of the job on this node hung
	ReasonMarker Reason = "marker" // another node's agent reported a hang (its Marker)
	ReasonManual Reason = "manual" // a person asked: xpu-timer dump
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
	Schema   string     `json:"schema"`
	ID       string     `json:"id"`    // unique per hang episode
	Agent    string     `json:"agent"` // host/pid/start of the writing agent
	Job      string     `json:"job"`
	Host     string     `json:"host"`
	Time     time.Time  `json:"time"`
	Ranks    []int      `json:"ranks"` // ranks that hung
	PIDs     []int      `json:"pids"`
	Kinds    []HangKind `json:"kinds"` // their decision kinds
	Op       string     `json:"op,omitempty"`
	Timeline string     `json:"timeline"`
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

// MaxMarkerBytes is the largest marker file read: markers are a few hundred
// bytes, and the directory is shared with others.
const MaxMarkerBytes = 64 << 10

// ErrNotMarkerFile reports a marker path that is no regular file of at
// most MaxMarkerBytes: a symbolic link, a FIFO, a device, a directory, or a
// file too large. It is never followed, opened for long or read whole.
var ErrNotMarkerFile = errors.New("not a regular marker file")

// ReadMarker reads the marker at path from a directory others may write
// to: opened without following a symbolic link and without blocking (a
// FIFO there neither blocks nor is read), a regular file only, at most
// MaxMarkerBytes. mod and size let the caller skip an unchanged file. A
// missing file is an error matching fs.ErrNotExist.
func ReadMarker(path string) (m *Marker, mod time.Time, size int64, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, time.Time{}, 0, fmt.Errorf("%s: a symbolic link: %w", path, ErrNotMarkerFile)
		}
		return nil, time.Time{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, time.Time{}, 0, fmt.Errorf("%s: %v: %w", path, st.Mode().Type(), ErrNotMarkerFile)
	}
	if st.Size() > MaxMarkerBytes {
		return nil, time.Time{}, 0, fmt.Errorf("%s: %d bytes, over %d: %w", path, st.Size(), MaxMarkerBytes, ErrNotMarkerFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxMarkerBytes+1))
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	if len(b) > MaxMarkerBytes {
		return nil, time.Time{}, 0, fmt.Errorf("%s: grew over %d bytes: %w", path, MaxMarkerBytes, ErrNotMarkerFile)
	}
	m, err = ParseMarker(b)
	return m, st.ModTime(), st.Size(), err
}
