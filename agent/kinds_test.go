package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timer"
)

// The typed kinds spell the JSON exactly as the strings they replaced: a
// watch line, a dump file's reason and a marker read the same.
func TestKindsJSON(t *testing.T) {
	at := time.Date(2026, 11, 26, 13, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    any
		want string
	}{
		{Report{Event: EventHang, Time: at, PID: 7, Kind: timer.HangHost, Op: "AllReduce", OpKind: timer.OpCollective},
			`{"event":"hang","time":"2026-11-26T13:00:00Z","pid":7,"kind":"host","op":"AllReduce","op_kind":"collective"}`},
		{Report{Event: EventDump, Time: at, PID: 7, Path: "/t/00001-00002.stacktrace", Reason: dumpfile.ReasonPeer},
			`{"event":"dump","time":"2026-11-26T13:00:00Z","pid":7,"path":"/t/00001-00002.stacktrace","reason":"peer"}`},
		{Report{Event: EventDumpFailed, Time: at}, `{"event":"dump_failed","time":"2026-11-26T13:00:00Z"}`},
		{Report{Event: EventAttach, Time: at, PID: 7, Library: "libnccl.so.2"},
			`{"event":"attach","time":"2026-11-26T13:00:00Z","pid":7,"library":"libnccl.so.2"}`},
		{timer.Op{Kind: timer.OpMemcpy, Vendor: "cuda", Stream: 5, TID: 7, Issued: 1},
			`{"kind":"memcpy","vendor":"cuda","stream":5,"tid":7,"issued_ns":1,"grid":[0,0,0],"block":[0,0,0]}`},
		{dumpfile.Marker{Schema: dumpfile.MarkerSchema, Kinds: []dumpfile.HangKind{dumpfile.HangGPU, dumpfile.HangStalled}},
			`{"schema":"xpu-timer.marker/1","id":"","agent":"","job":"","host":"","time":"0001-01-01T00:00:00Z","ranks":null,"pids":null,"kinds":["gpu","stalled"],"timeline":""}`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("%T: %s, %v\nwant %s", tc.v, got, err, tc.want)
		}
	}
}
