package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

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
	server *http.Server
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
	JobName      string        // metric labels, marker name and dump labels
	PodName, IP  string        // metric and dump labels
	Port         int           // /metrics port; 0 picks a free one
	Pushgateway  string        // Pushgateway URL; "" disables pushing
	PushInterval time.Duration // re-push period while a rank stays hung

	Logger   *slog.Logger
	OnReport func(Report)
	Kill     func(pid int) error // nil: KillGroup
	Interval time.Duration
}

// OpenMonitor loads the tracer and prepares the loop from mo. It fails with
// an error matching ErrNotPermitted when eBPF is not permitted; a missing
// ptrace permission only turns stack capture into state-only dumps (logged).
func OpenMonitor(mo MonitorOptions) (*Monitor, error) {
	cfg := mo
	log := mo.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr, err := OpenTracer(cfg.Libraries)
	if err != nil {
		return nil, err
	}
	capt := NewCapturer(tr)
	if ok, why := PtraceAllowed(); !ok {
		log.Warn("stack capture is off: ptrace is not permitted; dumps will hold the hang decision and process state only",
			"reason", why, "grant", "run as root or grant CAP_SYS_PTRACE")
		capt = StateOnly("ptrace not permitted: " + why)
	}
	m := &Monitor{Tracer: tr, log: log, done: make(chan struct{})}
	o := Options{
		Tracer: tr, Capturer: capt, HangTimeout: cfg.HangTimeout, TimelinePath: cfg.TimelinePath, HangKill: cfg.HangKill,
		JobName: cfg.JobName, PodName: cfg.PodName, IP: cfg.IP, Logger: log, OnReport: mo.OnReport, Kill: mo.Kill,
		Interval: mo.Interval, Looker: &ProcLooker{},
	}
	if nv, err := gpu.Open(); err != nil {
		log.Info("GPU facts off: NVML unavailable", "err", err)
	} else {
		m.nvml = nv
		o.GPU = NVML{M: nv}
	}
	static := metrics.Static{IP: cfg.IP, JobName: cfg.JobName, PodName: cfg.PodName}
	if cfg.Pushgateway != "" {
		o.Pusher = metrics.NewPusher(cfg.Pushgateway, static, cfg.PushInterval)
	}
	m.Agent = New(o)
	x := metrics.New(static)
	x.SetSource(m.Agent.Snapshot)
	mux := http.NewServeMux()
	mux.Handle("/metrics", x.Handler())
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(cfg.Port))
	if err != nil {
		log.Warn("metrics not served: port unavailable", "port", cfg.Port, "err", err)
	} else {
		m.Addr = ln.Addr()
		m.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = m.server.Serve(ln) }()
		log.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics")
	}
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

// Close stops the loop, the server and the tracer.
func (m *Monitor) Close() error {
	if m.cancel != nil {
		m.cancel()
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			m.log.Warn("monitor did not stop in time")
		}
	}
	if m.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = m.server.Shutdown(ctx)
		cancel()
	}
	if m.nvml != nil {
		m.nvml.Close()
	}
	return m.Tracer.Close()
}
