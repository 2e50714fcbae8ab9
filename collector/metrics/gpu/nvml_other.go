//go:build !(linux && cgo)

package gpu

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

// Monitor is unavailable here: go-nvml needs Linux and cgo.
type Monitor struct{}

// Open fails with ErrUnavailable.
func Open() (*Monitor, error) {
	return nil, fmt.Errorf("nvml on %s/%s without cgo: %w", runtime.GOOS, runtime.GOARCH, ErrUnavailable)
}

func (m *Monitor) SetXidWindow(time.Duration) {}
func (m *Monitor) Close() error               { return nil }
func (m *Monitor) Count() (int, error)        { return 0, ErrUnavailable }
func (m *Monitor) Device(int) (dumpfile.GPU, error) {
	return dumpfile.GPU{}, ErrUnavailable
}
func (m *Monitor) WatchXids(context.Context) error { return ErrUnavailable }
func (m *Monitor) Xids(time.Time) []dumpfile.Xid   { return nil }
