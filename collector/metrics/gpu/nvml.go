//go:build linux && cgo

package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

// maxXids bounds the Xid events kept in the window.
const maxXids = 256

// Monitor is an initialised NVML library. Its methods are safe for
// concurrent use.
type Monitor struct {
	lib    nvml.Interface
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	xids []dumpfile.Xid
}

// Open initialises NVML from the system library (libnvidia-ml.so.1).
func Open() (*Monitor, error) { return OpenLibrary(nvml.New()) }

// OpenLibrary initialises lib (the real library, or a go-nvml mock).
func OpenLibrary(lib nvml.Interface) (m *Monitor, err error) {
	defer func() {
		// go-nvml panics in a few paths when the library is absent; treat
		// any panic during Init as unavailability.
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("nvml init: %v: %w", r, ErrUnavailable)
		}
	}()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml init: %s: %w", errorString(lib, ret), ErrUnavailable)
	}
	return &Monitor{lib: lib, window: DefaultXidWindow, now: time.Now}, nil
}

// SetXidWindow sets how long Xid events are kept (default DefaultXidWindow).
func (m *Monitor) SetXidWindow(d time.Duration) {
	m.mu.Lock()
	m.window = d
	m.mu.Unlock()
}

// Close shuts NVML down.
func (m *Monitor) Close() error {
	if ret := m.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %s", errorString(m.lib, ret))
	}
	return nil
}

// Count returns the number of devices.
func (m *Monitor) Count() (int, error) {
	n, ret := m.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("device count: %s", errorString(m.lib, ret))
	}
	return n, nil
}

// Device returns the facts of device index (a rank's LOCAL_RANK or its
// CUDA_VISIBLE_DEVICES entry). UUID and name are required; utilization and
// memory are left zero where the device does not report them.
func (m *Monitor) Device(index int) (dumpfile.GPU, error) {
	d, ret := m.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return dumpfile.GPU{}, fmt.Errorf("device %d: handle: %s", index, errorString(m.lib, ret))
	}
	dev := dumpfile.GPU{Index: index}
	if dev.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return dumpfile.GPU{}, fmt.Errorf("device %d: uuid: %s", index, errorString(m.lib, ret))
	}
	if dev.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return dumpfile.GPU{}, fmt.Errorf("device %d: name: %s", index, errorString(m.lib, ret))
	}
	if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
		dev.Utilization = u.Gpu
	}
	if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		dev.MemoryUsed, dev.MemoryTotal = mem.Used, mem.Total
	}
	return dev, nil
}

// WatchXids registers every device for Xid critical error events and
// records them until ctx is done. Devices that do not support the events
// are skipped; when none does, it returns ErrNoXidEvents.
func (m *Monitor) WatchXids(ctx context.Context) error {
	n, err := m.Count()
	if err != nil {
		return err
	}
	set, ret := m.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("create event set: %s", errorString(m.lib, ret))
	}
	defer set.Free()
	uuids := map[string]int{}
	registered := 0
	for i := 0; i < n; i++ {
		d, ret := m.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, _ := d.GetUUID()
		uuids[uuid] = i
		if d.RegisterEvents(nvml.EventTypeXidCriticalError, set) == nvml.SUCCESS {
			registered++
		}
	}
	if registered == 0 {
		return ErrNoXidEvents
	}
	const waitMs = 500
	for ctx.Err() == nil {
		e, ret := set.Wait(waitMs)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			return fmt.Errorf("wait for events: %s", errorString(m.lib, ret))
		}
		if e.EventType&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		x := dumpfile.Xid{Device: -1, Xid: e.EventData, Time: m.now()}
		if e.Device != nil {
			x.UUID, _ = e.Device.GetUUID()
			if i, ok := uuids[x.UUID]; ok {
				x.Device = i
			}
		}
		m.record(x)
	}
	return nil
}

func (m *Monitor) record(x dumpfile.Xid) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.xids = append(m.xids, x)
	if len(m.xids) > maxXids {
		m.xids = append(m.xids[:0], m.xids[len(m.xids)-maxXids:]...)
	}
}

// Xids returns the Xid events that happened within the window before now,
// oldest first, and forgets older ones.
func (m *Monitor) Xids(now time.Time) []dumpfile.Xid {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := m.xids[:0]
	for _, x := range m.xids {
		if now.Sub(x.Time) < m.window {
			keep = append(keep, x)
		}
	}
	m.xids = keep
	return append([]dumpfile.Xid(nil), keep...)
}

// errorString describes ret without calling into a library that failed to
// load.
func errorString(lib nvml.Interface, ret nvml.Return) (s string) {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "NVML library not found"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVIDIA driver not loaded"
	}
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("nvml error %d", int(ret))
		}
	}()
	return lib.ErrorString(ret)
}
