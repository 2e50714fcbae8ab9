// Package trace is the on-disk format of a rank's flight recorder trace,
// RRRRR-WWWWW.trace.json beside its dump: a Chrome trace (the JSON Object
// Format of the Trace Event Format, which Perfetto and chrome://tracing
// open). collector/capture/flight records the events and converts them into
// this form.
package trace

import "fmt"

// Ext is the file name extension of a written trace: RRRRR-WWWWW.trace.json.
const Ext = ".trace.json"

// Name is the trace file name of rank in a job of world ranks.
func Name(rank, world int) string { return fmt.Sprintf("%05d-%05d%s", rank, world, Ext) }

// Event is one Chrome trace event (the JSON Object Format of the Trace Event
// Format): ph "X" complete events, "i" instants, "M" metadata.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`            // µs (CLOCK_MONOTONIC)
	Dur  *float64       `json:"dur,omitempty"` // µs, ph "X"
	S    string         `json:"s,omitempty"`   // instant scope: "t" (thread)
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// File is a whole trace as written.
type File struct {
	TraceEvents     []Event        `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData,omitempty"`
}
