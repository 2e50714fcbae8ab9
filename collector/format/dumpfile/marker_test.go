package dumpfile

import (
	"errors"
	"testing"
)

func FuzzParseMarker(f *testing.F) {
	f.Add([]byte(`{"schema":"xpu-timer.marker/1","id":"a","time":"2026-01-01T00:00:00Z","ranks":[1]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMarker(b)
		if err != nil {
			if !errors.Is(err, ErrBadMarker) {
				t.Fatalf("error %v is not ErrBadMarker", err)
			}
			return
		}
		if m.Schema != MarkerSchema || m.ID == "" {
			t.Fatalf("accepted %+v", m)
		}
	})
}

func TestMarkerName(t *testing.T) {
	for in, want := range map[string]string{"": "hang-default.marker", "job/1 x": "hang-job_1_x.marker", "a.b-c_d": "hang-a.b-c_d.marker"} {
		if got := MarkerName(in); got != want {
			t.Errorf("MarkerName(%q) = %q, want %q", in, got, want)
		}
	}
}
