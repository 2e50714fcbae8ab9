package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/collector/metrics/gpu"
	"github.com/xpu-timer/xpu-timer/internal/caps"
)

// Monitor is what xpu_timer_launch and `xpu-timer agent` run: the tracer,
// the node loop, the /metrics server, the Pushgateway pusher and NVML.
type Monitor struct {
	Agent  *Agent
	Tracer Tracer
	Addr   net.Addr // where /metrics is served; nil when the port was taken

	log    *slog.Logger
	web    *metrics.Server
	nvml   *gpu.Monitor
	cancel context.CancelFunc
	done   chan struct{}
}

// OpenMonitor loads the tracer and prepares the loop from o: its Settings
// as the user chose them, and what the command adds (Logger, OnReport,
// Kill, Interval, DetectOnly). OpenMonitor sets o's Capturer, Sampler,
// LagSampler, GPU and Pusher itself, and its Tracer unless a test set one.
// It fails with an error matching ErrNotPermitted when eBPF is not
// permitted; a missing ptrace permission only turns stack capture into
// state-only dumps, and turns stack samples off (logged).
//
// With o.DetectOnly (`xpu-timer watch`) the loop decides and reports
// only: no dumps, no /metrics, no pushes, no NVML; stacks are read for
// the samples alone.
func OpenMonitor(o Options) (*Monitor, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		o.Logger = log
	}
	tr := o.Tracer
	if tr == nil {
		var err error
		if tr, err = OpenTracer(o.Settings); err != nil {
			return nil, err
		}
	}
	capt := NewCapturer(tr)
	dump.Shared().Cache().SetLimit(o.SymbolCacheBytes)
	ptraceOK, why := caps.PtraceAllowed()
	if !ptraceOK {
		log.Warn("stack capture is off: ptrace is not permitted; dumps will hold the hang decision and process state only",
			"reason", why, "grant", "run as root or grant CAP_SYS_PTRACE")
		capt = StateOnly("ptrace not permitted: " + why)
	}
	m := &Monitor{Tracer: tr, log: log, done: make(chan struct{})}
	o.Tracer, o.Capturer, o.Sampler, o.LagSampler, o.GPU, o.Pusher = tr, capt, nil, nil, nil, nil
	if o.StallWatch && ptraceOK {
		o.Sampler = NewSampler(tr)
	}
	if o.DetectOnly {
		o.Capturer = nil // watch dumps nothing and leaves the timeline path alone
		if ptraceOK && o.LagWarn > 0 {
			o.LagSampler = capt // the early warning's one sample of a lagging rank
		}
		m.Agent = New(o)
		return m, nil
	}
	if !o.StallWatch {
		log.Info("stall watch off: only GPU calls decide hangs; a rank silent with no GPU call in flight goes unseen")
	}
	if !o.KernelNames {
		log.Info("kernel names off: a launch through the driver is known by its handle (kernel 0x...)")
	}
	if !o.CopyEventProbes {
		log.Info("copy and event probes off: kernels are known complete at synchronizes only, and a thread polling an event is seen by its stack alone")
	}
	if nv, err := gpu.Open(); err != nil {
		log.Info("GPU facts off: NVML unavailable", "err", err)
	} else {
		m.nvml = nv
		o.GPU = NVML{M: nv}
	}
	static := metrics.Static{IP: o.IP, JobName: o.JobName, PodName: o.PodName}
	if o.Pushgateway != "" {
		o.Pusher = metrics.NewPusher(o.Pushgateway, static, o.PushInterval)
	}
	m.Agent = New(o)
	x := metrics.New(static)
	x.SetSource(m.Agent.Snapshot)
	x.SetTopKernels(o.TopKernels)
	m.web, m.Addr = serveMetrics(x, o.Settings, log)
	return m, nil
}

// Start runs the loop in the background; a panic in it stops monitoring,
// never the caller.
func (m *Monitor) Start(ctx context.Context) {
	ctx, m.cancel = context.WithCancel(ctx)
	if m.nvml != nil {
		go func() {
			if err := m.nvml.WatchXids(ctx); err != nil && !errors.Is(err, context.Canceled) {
				m.log.Info("Xid events off", "err", err)
			}
		}()
	}
	go func() {
		defer close(m.done)
		defer func() {
			if r := recover(); r != nil {
				m.log.Error("monitoring stopped after an internal error; the job is not affected", "panic", fmt.Sprint(r))
			}
		}()
		if err := m.Agent.Run(ctx); err != nil {
			m.log.Error("monitoring stopped", "err", err)
		}
	}()
	m.Agent.WaitTracing(readyWait)
}

// readyWait bounds how long Start waits for the tracer to read.
const readyWait = time.Second

// Close stops the loop, the server and the tracer, in at most about 5 s
// (the launcher exits with its job's status that soon after the job): 2 s
// for the loop (a dump in progress stops between ranks), 1 s for the
// server, 2 s for the tracer's links (ebpf.Tracer.Close).
func (m *Monitor) Close() error {
	if m.cancel != nil {
		m.cancel()
		select {
		case <-m.done:
		case <-time.After(2 * time.Second):
			m.log.Warn("monitor did not stop in time; closing the tracer under it")
		}
	}
	if m.web != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = m.web.Close(ctx)
		cancel()
	}
	if m.nvml != nil {
		m.nvml.Close()
	}
	return m.Tracer.Close()
}

// serveMetrics serves /metrics, /healthz and / on set's listen addresses
// with its web configuration (TLS, basic auth). A problem there is logged
// and costs the metrics only: it returns nil.
func serveMetrics(x *metrics.Exporter, set Settings, log *slog.Logger) (*metrics.Server, net.Addr) {
	addrs := set.ListenAddresses()
	h, err := x.WebHandler()
	if err == nil {
		var s *metrics.Server
		if s, err = metrics.Serve(metrics.WebOptions{ListenAddresses: addrs, ConfigFile: set.WebConfigFile, Logger: log}, h); err == nil {
			log.Info("serving metrics", "addr", s.Addrs[0].String(), "path", "/metrics", "tls_auth_config", set.WebConfigFile)
			return s, s.Addrs[0]
		}
	}
	log.Warn("metrics not served", "addr", addrs, "err", err)
	return nil, nil
}
