package agent

import (
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/metrics/gpu"
)

// GPUSource supplies NVML facts of a rank's device, for its dump and its
// metrics; nil means unknown. A source that also has
// Xids(time.Time) []dumpfile.Xid gives the node's recent Xid events to the
// metrics.
type GPUSource interface {
	GPU(localRank int) *dumpfile.GPU
}

// NVML adapts an NVML monitor to GPUSource: a rank's device is the one
// indexed by its local rank.
type NVML struct{ M *gpu.Monitor }

// GPU returns the device's facts with its recent Xid events.
func (n NVML) GPU(localRank int) *dumpfile.GPU {
	d, err := n.M.Device(localRank)
	if err != nil {
		return nil
	}
	for _, x := range n.M.Xids(time.Now()) {
		if x.Device == d.Index {
			d.Xids = append(d.Xids, x)
		}
	}
	return &d
}

// Xids returns the Xid events still in the reporting window.
func (n NVML) Xids(now time.Time) []dumpfile.Xid { return n.M.Xids(now) }
