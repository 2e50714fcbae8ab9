package agent

import (
	"strconv"
	"time"

	"github.com/xpu-timer/xpu-timer/ranks"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// Settings are what a user chooses for monitoring: one value that the
// XPU_TIMER_* flags, environment variables and settings file fill directly
// (cmd/internal/config embeds it), and that xpu_timer_launch, `xpu-timer
// agent` and `xpu-timer watch` open the loop with (Options embeds it). A
// new setting is one field here, read where it is used, plus its variable
// in cmd/internal/config/vars.go (name, flag, default, parse, usage line).
//
// Zero values take the defaults noted. New reads the loop's settings;
// OpenMonitor reads the rest (the probes, stack capture, metrics and
// pushes), which New ignores.
type Settings struct {
	HangTimeout  time.Duration      // XPU_TIMER_HANG_TIMEOUT; default timer.DefaultHangTimeout
	TimelinePath string             // XPU_TIMER_TIMELINE_PATH: where dumps and markers go; default timeline.DefaultPath
	HangKill     bool               // XPU_TIMER_HANG_KILL: end the hung process group after the dump
	LagWarn      time.Duration      // XPU_TIMER_LAG_WARN: warn of a rank its peers waited this long for (package lagwarn); 0: no warning (the commands' default is DefaultLagWarn)
	StallWatch   bool               // XPU_TIMER_STALL_WATCH: look at ranks each check (a look.Proc when Options.Looker is nil); false: only GPU calls decide
	JobName      string             // XPU_TIMER_JOB_NAME: metric labels, marker name and dump labels
	PodName      string             // XPU_TIMER_POD_NAME: metric and dump labels
	IP           string             // XPU_TIMER_IP: metric and dump labels
	Retain       timeline.Retention // XPU_TIMER_RETAIN_*: what earlier incarnations may leave in the timeline path; zero keeps everything
	Scope        *ranks.Scope       // the node agent's filters (XPU_TIMER_NAMESPACES, ...); nil: every process may be a rank, one out of scope is never a rank and its events are dropped

	// Read by OpenMonitor (and watch's tracer).
	Libraries          []string      // XPU_TIMER_LIBRARIES: extra vendor library paths to probe
	ProbeRingBytes     int64         // XPU_TIMER_PROBE_RING_BYTES: the probes' call rings (ebpf.Options.RingBufferBytes); 0: the default
	KernelNames        bool          // XPU_TIMER_KERNEL_NAMES: probe the lookups that name kernels (false: ebpf.Options.NoKernelNames)
	CopyEventProbes    bool          // XPU_TIMER_COPY_EVENT_PROBES: probe asynchronous copies and events (false: ebpf.Options.NoCopyEventProbes)
	SymbolCacheBytes   int64         // XPU_TIMER_SYMBOL_CACHE_BYTES: parsed libraries kept across dumps; 0: symbols.DefaultCacheBytes
	Port               int           // XPU_TIMER_PORT: /metrics port; 0 picks a free one
	WebListenAddresses []string      // XPU_TIMER_WEB_LISTEN_ADDRESS: where /metrics is served; default ":<Port>"
	WebConfigFile      string        // XPU_TIMER_WEB_CONFIG_FILE: exporter-toolkit TLS and basic auth file
	TopKernels         int           // XPU_TIMER_METRICS_TOP_KERNELS: kernels named in the metrics besides their class
	Pushgateway        string        // XPU_TIMER_PUSHGATEWAY: Pushgateway URL; "" disables pushing
	PushInterval       time.Duration // XPU_TIMER_PUSH_INTERVAL: re-push period while a rank stays hung
}

// ListenAddresses are where /metrics is served: WebListenAddresses, else
// every interface on Port.
func (s Settings) ListenAddresses() []string {
	if len(s.WebListenAddresses) > 0 {
		return s.WebListenAddresses
	}
	return []string{":" + strconv.Itoa(s.Port)}
}
