package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dump"
	"github.com/xpu-timer/xpu-timer/collector/gpu"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
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

// MonitorOptions is what a Monitor runs with: the settings (the commands
// map their configuration onto these) and what a command chooses beyond
// them.
type MonitorOptions struct {
	Libraries    []string      // extra vendor library paths to probe
	HangTimeout  time.Duration // see Options
	TimelinePath string        // see Options
	HangKill     bool          // see Options
	StallWatch   bool          // look at ranks each check (Options.Looker); false: only GPU calls decide
	JobName      string        // metric labels, marker name and dump labels
	PodName, IP  string        // metric and dump labels
	Port         int           // /metrics port; 0 picks a free one
	Pushgateway  string        // Pushgateway URL; "" disables pushing
	PushInterval time.Duration // re-push period while a rank stays hung
	SymbolCache  int64         // bytes of parsed libraries kept across dumps; 0: symbols.DefaultCacheBytes
	RingBytes    int64         // bytes of the probes' call rings (ebpf.Options.RingBufferBytes); 0: the default

	ListenAddresses []string // where /metrics is served; default ":<Port>"
	WebConfigFile   string   // exporter-toolkit TLS and basic auth file
	TopKernels      int      // kernels named in the metrics besides their class

	Retain Retention // see Options
	Scope  *Scope    // see Options (the node agent's filters; nil for the launcher)

	Logger   *slog.Logger
	OnReport func(Report)
	Kill     func(pid int) error // nil: KillGroup
	Interval time.Duration
}

// OpenMonitor loads the tracer and prepares the loop from mo. It fails with
// an error matching ErrNotPermitted when eBPF is not permitted; a missing
// ptrace permission only turns stack capture into state-only dumps (logged).
func OpenMonitor(mo MonitorOptions) (*Monitor, error) {
	log := mo.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr, err := OpenTracer(mo.Libraries, mo.RingBytes)
	if err != nil {
		return nil, err
	}
	capt := NewCapturer(tr)
	dump.Shared().Cache().SetLimit(mo.SymbolCache)
	ptraceOK, why := PtraceAllowed()
	if !ptraceOK {
		log.Warn("stack capture is off: ptrace is not permitted; dumps will hold the hang decision and process state only",
			"reason", why, "grant", "run as root or grant CAP_SYS_PTRACE")
		capt = StateOnly("ptrace not permitted: " + why)
	}
	m := &Monitor{Tracer: tr, log: log, done: make(chan struct{})}
	o := Options{
		Tracer: tr, Capturer: capt, HangTimeout: mo.HangTimeout, TimelinePath: mo.TimelinePath, HangKill: mo.HangKill,
		JobName: mo.JobName, PodName: mo.PodName, IP: mo.IP, Logger: log, OnReport: mo.OnReport, Kill: mo.Kill,
		Interval: mo.Interval, Retain: mo.Retain, Scope: mo.Scope,
	}
	if mo.StallWatch {
		o.Looker = &ProcLooker{}
		if ptraceOK {
			o.Sampler = NewSampler(tr)
		}
	} else {
		log.Info("stall watch off: only GPU calls decide hangs; a rank silent with no GPU call in flight goes unseen")
	}
	if nv, err := gpu.Open(); err != nil {
		log.Info("GPU facts off: NVML unavailable", "err", err)
	} else {
		m.nvml = nv
		o.GPU = NVML{M: nv}
	}
	static := metrics.Static{IP: mo.IP, JobName: mo.JobName, PodName: mo.PodName}
	if mo.Pushgateway != "" {
		o.Pusher = metrics.NewPusher(mo.Pushgateway, static, mo.PushInterval)
	}
	m.Agent = New(o)
	x := metrics.New(static)
	x.SetSource(m.Agent.Snapshot)
	x.SetTopKernels(mo.TopKernels)
	m.web, m.Addr = serveMetrics(x, mo, log)
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
}

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

// serveMetrics serves /metrics, /healthz and / on cfg's listen addresses
// with its web configuration (TLS, basic auth). A problem there is logged
// and costs the metrics only: it returns nil.
func serveMetrics(x *metrics.Exporter, mo MonitorOptions, log *slog.Logger) (*metrics.Server, net.Addr) {
	addrs := mo.ListenAddresses
	if len(addrs) == 0 {
		addrs = []string{":" + strconv.Itoa(mo.Port)}
	}
	h, err := x.WebHandler()
	if err == nil {
		var s *metrics.Server
		if s, err = metrics.Serve(metrics.WebOptions{ListenAddresses: addrs, ConfigFile: mo.WebConfigFile, Logger: log}, h); err == nil {
			log.Info("serving metrics", "addr", s.Addrs[0].String(), "path", "/metrics", "tls_auth_config", mo.WebConfigFile)
			return s, s.Addrs[0]
		}
	}
	log.Warn("metrics not served", "addr", addrs, "err", err)
	return nil, nil
}
