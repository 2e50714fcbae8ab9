//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

func mockDevice(uuid string) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:             func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc:             func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 97, Memory: 40}, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 80 << 30, Used: 10 << 30, Free: 70 << 30}, nvml.SUCCESS
		},
		RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
	}
}

func mockLib(devs []*mock.Device, set nvml.EventSet) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		ErrorStringFunc:    func(r nvml.Return) string { return "mock error" },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS },
	}
}

func TestDeviceFacts(t *testing.T) {
	m, err := OpenLibrary(mockLib([]*mock.Device{mockDevice("GPU-0"), mockDevice("GPU-1")}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	d, err := m.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	want := dumpfile.GPU{Index: 1, UUID: "GPU-1", Name: "NVIDIA H100 80GB HBM3", Utilization: 97, MemoryUsed: 10 << 30, MemoryTotal: 80 << 30}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	if _, err := m.Device(2); err == nil {
		t.Fatal("device 2 of 2: want error")
	}
}

func TestOpenFails(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	_, err := OpenLibrary(lib)
	if !errors.Is(err, ErrUnavailable) || err.Error() != "nvml init: NVIDIA driver not loaded: nvml unavailable" {
		t.Fatalf("err %v", err)
	}
}

// TestRealLibraryNoDriver opens Debian's libnvidia-ml1 on a machine without
// an NVIDIA driver: Init must fail cleanly with ErrUnavailable.
func TestRealLibraryNoDriver(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
	if _, err := os.Stat(lib); err != nil {
		privileged.Skip(t, "libnvidia-ml1 not installed (scripts/apt-packages.txt)")
	}
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("an NVIDIA driver is present: the no-driver path cannot be tested here")
	}
	m, err := OpenLibrary(nvml.New(nvml.WithLibraryPath(lib)))
	if err == nil {
		m.Close()
		t.Fatal("Open succeeded without a driver")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
	t.Logf("notice: %v", err)
	// No library at all.
	_, err = OpenLibrary(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing library: err %v, want ErrUnavailable", err)
	}
}

func TestXidsAgeOut(t *testing.T) {
	events := make(chan nvml.EventData, 4)
	dev0, dev1 := mockDevice("GPU-0"), mockDevice("GPU-1")
	dev0.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-events:
				return e, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	m, err := OpenLibrary(mockLib([]*mock.Device{dev0, dev1}, set))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 0)
	var mu sync.Mutex
	clock := t0
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	m.SetXidWindow(time.Minute)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.WatchXids(ctx) }()

	events <- nvml.EventData{Device: dev1, EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	events <- nvml.EventData{Device: dev1, EventType: nvml.EventTypeSingleBitEccError, EventData: 1} // not an Xid
	for len(m.Xids(t0)) < 1 {                                                                        // until the first is recorded at t0
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	clock = t0.Add(30 * time.Second)
	mu.Unlock()
	events <- nvml.EventData{Device: dev1, EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	// Wait until both Xids are recorded (bounded by the test timeout).
	for len(m.Xids(t0)) < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := m.Xids(t0.Add(45 * time.Second))
	if len(got) != 2 || got[0] != (dumpfile.Xid{Device: 1, UUID: "GPU-1", Xid: 79, Time: t0}) || got[1].Xid != 48 {
		t.Fatalf("within window: %+v", got)
	}
	if got := m.Xids(t0.Add(61 * time.Second)); len(got) != 1 || got[0].Xid != 48 {
		t.Fatalf("after first aged out: %+v", got)
	}
	if got := m.Xids(t0.Add(2 * time.Minute)); len(got) != 0 {
		t.Fatalf("after both aged out: %+v", got)
	}
}

func TestWatchXidsUnsupported(t *testing.T) {
	dev := mockDevice("GPU-0")
	dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	set := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	m, err := OpenLibrary(mockLib([]*mock.Device{dev}, set))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchXids(context.Background()); !errors.Is(err, ErrNoXidEvents) {
		t.Fatalf("err %v", err)
	}
}
