package agent

import (
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/gpu"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
)

// NVML adapts an NVML monitor to GPUSource: a rank's device is the one
// indexed by its local rank.
type NVML struct{ M *gpu.Monitor }

// Dump returns the device facts and recent Xid events for a dump.
func (n NVML) Dump(localRank int) *dumpfile.GPU {
	d, err := n.M.Device(localRank)
	if err != nil {
		return nil
	}
	g := &dumpfile.GPU{Index: d.Index, UUID: d.UUID, Name: d.Name, Utilization: uint32(d.Utilization*100 + 0.5),
		MemoryUsed: d.MemoryUsed, MemoryTotal: d.MemoryTotal}
	for _, x := range n.M.Xids(time.Now()) {
		if x.Device == d.Index {
			g.Xids = append(g.Xids, dumpfile.XidEvent{Xid: x.Xid, Time: x.Time})
		}
	}
	return g
}

// Metrics returns the device facts for the metrics.
func (n NVML) Metrics(localRank int) *metrics.GPU {
	d, err := n.M.Device(localRank)
	if err != nil {
		return nil
	}
	return &metrics.GPU{Index: d.Index, UUID: d.UUID, Name: d.Name, Utilization: d.Utilization,
		MemoryUsed: d.MemoryUsed, MemoryTotal: d.MemoryTotal}
}

// Xids returns the Xid events still in the reporting window.
func (n NVML) Xids(now time.Time) []metrics.Xid {
	var out []metrics.Xid
	for _, x := range n.M.Xids(now) {
		out = append(out, metrics.Xid{Device: x.Device, UUID: x.UUID, Xid: x.Xid, Time: x.Time})
	}
	return out
}
