//go:build linux && (386 || amd64)

package ebpf

import (
	"testing"

	"github.com/xpu-timer/xpu-timer/timer"
)

// The kinds probes.bpf.c writes into struct event (enum kind, exported by
// bpf2go -type kind) are timer's, value for value, and the process record
// kinds (enum proc_kind) lie beyond every timer.Kind and fit its byte.
func TestKindsMatchTimer(t *testing.T) {
	for _, c := range []struct {
		bpf  probesKind
		want timer.Kind
	}{
		{probesKindK_LAUNCH, timer.KindLaunch},
		{probesKindK_GRAPH_LAUNCH, timer.KindGraphLaunch},
		{probesKindK_MEMCPY_ASYNC, timer.KindMemcpyAsync},
		{probesKindK_MEMCPY, timer.KindMemcpy},
		{probesKindK_EVENT_RECORD, timer.KindEventRecord},
		{probesKindK_EVENT_QUERY, timer.KindEventQuery},
		{probesKindK_EVENT_SYNC, timer.KindEventSynchronize},
		{probesKindK_STREAM_SYNC, timer.KindStreamSynchronize},
		{probesKindK_STREAM_QUERY, timer.KindStreamQuery},
		{probesKindK_STREAM_WAIT_EVENT, timer.KindStreamWaitEvent},
		{probesKindK_DEVICE_SYNC, timer.KindDeviceSynchronize},
		{probesKindK_EVENT_ELAPSED, timer.KindEventElapsed},
		{probesKindK_COMM_INIT, timer.KindCommInit},
		{probesKindK_COMM_DESTROY, timer.KindCommDestroy},
		{probesKindK_COLLECTIVE, timer.KindCollective},
		{probesKindK_GROUP_START, timer.KindGroupStart},
		{probesKindK_GROUP_END, timer.KindGroupEnd},
	} {
		if uint32(c.bpf) != uint32(c.want) {
			t.Errorf("C kind %d, timer.%v is %d", c.bpf, c.want, c.want)
		}
		if c.want.String() == "unknown" {
			t.Errorf("C kind %d has no timer.Kind", c.bpf)
		}
	}
	for _, k := range []probesProcKind{probesProcKindEV_FORK, probesProcKindEV_EXEC, probesProcKindEV_EXIT, probesProcKindEV_MMAP} {
		if k > 255 || timer.Kind(k).String() != "unknown" || timer.Kind(k) <= timer.KindProcessExit {
			t.Errorf("process kind %d collides with a timer.Kind or does not fit a byte", k)
		}
	}
}
