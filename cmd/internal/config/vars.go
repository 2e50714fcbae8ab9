// Package config resolves the XPU_TIMER_* settings of the launcher and the
// agent. Every variable also has a command-line flag; a value is taken from,
// in order: the flag, the environment, the XPU_TIMER_CONFIG file, then the
// default. The label identity (job, pod, ip) defaults to what the platform
// sets (DLRover's ELASTIC_JOB_NAME, the Kubernetes downward API's POD_NAME and
// POD_IP) when no XPU_TIMER_* value names it.
package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
	"github.com/xpu-timer/xpu-timer/ranks/identity"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Config is the resolved configuration: the monitor's settings, which the
// variables fill directly and the commands open the monitor with, and the
// commands' own (ports, logging, the settings file).
type Config struct {
	agent.Settings // every XPU_TIMER_* the monitor reads (see agent.Settings)

	BasePort   int        // XPU_TIMER_BASEPORT, default DefaultBasePort; Port defaults to BasePort+1
	ConfigFile string     // XPU_TIMER_CONFIG
	LoggingDir string     // XPU_TIMER_LOGGING_DIR; "stdout" logs to stdout, "" to stderr
	DebugMode  bool       // XPU_TIMER_DEBUG_MODE
	LogLevel   slog.Level // XPU_TIMER_LOG_LEVEL, default info
	LogFormat  string     // XPU_TIMER_LOG_FORMAT: LogFormatText (default) or LogFormatJSON
}

// DefaultBasePort is the base port of DLRover's xpu_timer; the metrics
// port is the one after it. The other defaults belong to the packages that
// use them: timer.DefaultHangTimeout, timeline.DefaultPath,
// metrics.DefaultPushInterval, symbols.DefaultCacheBytes.
const DefaultBasePort = 18888

// MinHangTimeout is the least hang timeout taken: below it a rank checked
// about once a second would be called hung between checks.
const MinHangTimeout = time.Second

// variable describes one setting: its names, default and how it is parsed.
type variable struct {
	env       string   // XPU_TIMER_* name, also the key in the config file
	flag      string   // flag name without dashes
	def       string   // default value ("" for none)
	fallbacks []string // platform variables consulted in place of the default
	agent     bool     // the node agent's alone (BindAgent)
	kind      string   // pflag type name: "duration", "bool", "int", "string", "strings"
	usage     string
	set       func(c *Config, v string) error
}

// variables lists every setting; the order is the order of flags and of
// printed settings.
var variables = []variable{
	{env: "XPU_TIMER_HANG_TIMEOUT", flag: "hang-timeout", def: seconds(timer.DefaultHangTimeout), kind: "duration",
		usage: "how long GPU work may stay outstanding before the rank counts as hung (seconds, or a duration like 5s; at least 1s)",
		set: func(c *Config, v string) (err error) {
			c.HangTimeout, err = parseAtLeast(v, MinHangTimeout, "")
			return err
		}},
	{env: "XPU_TIMER_LAG_WARN", flag: "lag-warn", def: seconds(agent.DefaultLagWarn), kind: "duration",
		usage: "warn of a rank its peers have waited this long for in a collective it has not issued, with what it is doing (seconds or a duration, at least 1s; 0 turns the warning off)",
		set: func(c *Config, v string) (err error) {
			if strings.TrimSpace(v) == "0" {
				c.LagWarn = 0
				return nil
			}
			c.LagWarn, err = parseAtLeast(v, MinHangTimeout, " (0 turns it off)")
			return err
		}},
	{env: "XPU_TIMER_TIMELINE_PATH", flag: "timeline-path", def: timeline.DefaultPath, kind: "string",
		usage: "directory for hang stack dumps",
		set: func(c *Config, v string) error {
			if v == "" {
				return fmt.Errorf("empty path")
			}
			c.TimelinePath = v
			return nil
		}},
	{env: "XPU_TIMER_HANG_KILL", flag: "hang-kill", def: "false", kind: "bool",
		usage: "end the hung process group after its dump",
		set: func(c *Config, v string) (err error) {
			c.HangKill, err = parseBool(v)
			return err
		}},
	{env: "XPU_TIMER_STALL_WATCH", flag: "stall-watch", def: "true", kind: "bool",
		usage: "look at every rank's scheduler state and Python frames each check, to decide ranks that went silent with no GPU call in flight (off: only GPU calls decide)",
		set: func(c *Config, v string) (err error) {
			c.StallWatch, err = parseBool(v)
			return err
		}},
	{env: "XPU_TIMER_KERNEL_NAMES", flag: "kernel-names", def: "true", kind: "bool",
		usage: "probe the driver's kernel lookups (cuModuleGetFunction, cuLibraryGetKernel, cuKernelGetFunction while new kernels come) to name launches (off: a launch through the driver is known by its handle)",
		set: func(c *Config, v string) (err error) {
			c.KernelNames, err = parseBool(v)
			return err
		}},
	{env: "XPU_TIMER_COPY_EVENT_PROBES", flag: "copy-event-probes", def: "true", kind: "bool",
		usage: "probe asynchronous copies, event records and queries, stream waits and queries (off: kernels are known complete at synchronizes only, and a thread polling an event, as PyTorch's NCCL watchdog, is seen by its stack alone)",
		set: func(c *Config, v string) (err error) {
			c.CopyEventProbes, err = parseBool(v)
			return err
		}},
	{env: "XPU_TIMER_BASEPORT", flag: "base-port", def: strconv.Itoa(DefaultBasePort), kind: "int",
		usage: "base port; the metrics port defaults to base port + 1",
		set: func(c *Config, v string) (err error) {
			c.BasePort, err = parsePort(v)
			return err
		}},
	{env: "XPU_TIMER_PORT", flag: "port", kind: "int",
		usage: "Prometheus metrics port (default base port + 1; 0 picks a free port)",
		set: func(c *Config, v string) (err error) {
			c.Port, err = parsePort(v)
			return err
		}},
	{env: "XPU_TIMER_CONFIG", flag: "config", kind: "string",
		usage: "file of KEY=VALUE lines read for settings not given by flag or environment",
		set:   func(c *Config, v string) error { c.ConfigFile = v; return nil }},
	{env: "XPU_TIMER_LOGGING_DIR", flag: "logging-dir", kind: "string",
		usage: `log directory ("stdout" logs to stdout; default stderr)`,
		set:   func(c *Config, v string) error { c.LoggingDir = v; return nil }},
	{env: "XPU_TIMER_DEBUG_MODE", flag: "debug-mode", def: "false", kind: "bool",
		usage: "run even when the rank count does not match the GPUs seen",
		set: func(c *Config, v string) (err error) {
			c.DebugMode, err = parseBool(v)
			return err
		}},
	{env: "XPU_TIMER_PUSHGATEWAY", flag: "pushgateway", kind: "string",
		usage: "Prometheus Pushgateway URL to push hang events to (default: no push)",
		set: func(c *Config, v string) error {
			if v == "" {
				c.Pushgateway = ""
				return nil
			}
			u, err := url.Parse(v)
			if err != nil {
				return err
			}
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("want an http(s)://host[:port] URL")
			}
			c.Pushgateway = v
			return nil
		}},
	{env: "XPU_TIMER_PUSH_INTERVAL", flag: "push-interval", def: seconds(metrics.DefaultPushInterval), kind: "duration",
		usage: "how often hang events are pushed again while a rank stays hung (seconds or a duration)",
		set: func(c *Config, v string) (err error) {
			c.PushInterval, err = parseSeconds(v)
			return err
		}},
	{env: "XPU_TIMER_LIBRARIES", flag: "libraries", kind: "strings",
		usage: "extra vendor library paths to probe, comma-separated (renamed CUDA/NCCL/MACA libraries)",
		set: func(c *Config, v string) error {
			c.Libraries = nil
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					c.Libraries = append(c.Libraries, p)
				}
			}
			return nil
		}},
	{env: "XPU_TIMER_SYMBOL_CACHE_BYTES", flag: "symbol-cache-bytes", def: strconv.Itoa(symbols.DefaultCacheBytes), kind: "bytes",
		usage: "memory the parsed libraries kept across dumps may take (bytes, or with a KiB, MiB or GiB suffix)",
		set: func(c *Config, v string) (err error) {
			c.SymbolCacheBytes, err = parseBytes(v)
			return err
		}},
	{env: "XPU_TIMER_PROBE_RING_BYTES", flag: "probe-ring-bytes", def: strconv.Itoa(ebpf.DefaultRingBytes), kind: "bytes",
		usage: "memory of the slots of the rings the probes' call records wait in until read (bytes, or with a KiB, MiB or GiB suffix; a power of two of 64-byte records per ring, at least 4096, and a 64-byte header; 16 rings at most): raise it when probe events are lost",
		set: func(c *Config, v string) (err error) {
			c.ProbeRingBytes, err = parseBytes(v)
			return err
		}},
	{env: "XPU_TIMER_WEB_LISTEN_ADDRESS", flag: "web.listen-address", kind: "strings",
		usage: "addresses to serve /metrics on, comma-separated host:port (default :PORT, every interface; 127.0.0.1:PORT for loopback only)",
		set: func(c *Config, v string) error {
			c.WebListenAddresses = nil
			for _, a := range strings.Split(v, ",") {
				if a = strings.TrimSpace(a); a == "" {
					continue
				}
				if _, port, err := net.SplitHostPort(a); err != nil {
					return fmt.Errorf("%q: want host:port", a)
				} else if _, err := parsePort(port); err != nil {
					return err
				}
				c.WebListenAddresses = append(c.WebListenAddresses, a)
			}
			return nil
		}},
	{env: "XPU_TIMER_WEB_CONFIG_FILE", flag: "web.config.file", kind: "string",
		usage: "Prometheus exporter-toolkit web configuration file: TLS and basic auth for /metrics (docs: prometheus/exporter-toolkit)",
		set:   func(c *Config, v string) error { c.WebConfigFile = v; return nil }},
	{env: "XPU_TIMER_METRICS_TOP_KERNELS", flag: "metrics.top-kernels", def: "0", kind: "int",
		usage: "name this many kernels of each rank, those with the most time, in xpu_timer_kernel_duration_seconds (each costs a histogram per rank); the rest are served by class",
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 || n > 1024 {
				return fmt.Errorf("%q: want a number 0-1024", v)
			}
			c.TopKernels = n
			return nil
		}},
	{env: "XPU_TIMER_LOG_LEVEL", flag: "log.level", def: "info", kind: "string",
		usage: "log level: debug, info, warn or error",
		set: func(c *Config, v string) error {
			if err := c.LogLevel.UnmarshalText([]byte(strings.TrimSpace(v))); err != nil {
				return fmt.Errorf("%q: want debug, info, warn or error", v)
			}
			return nil
		}},
	{env: "XPU_TIMER_LOG_FORMAT", flag: "log.format", def: LogFormatText, kind: "string",
		usage: "log format: logfmt or json",
		set: func(c *Config, v string) error {
			switch v = strings.TrimSpace(v); v {
			case LogFormatText, LogFormatJSON:
				c.LogFormat = v
				return nil
			}
			return fmt.Errorf("%q: want logfmt or json", v)
		}},
	retainCount, retainBytes, retainAge,
	namespaces, podRegex, podUIDs, commandRegex,
	{env: identity.JobNameVars[0], flag: "job-name", fallbacks: identity.JobNameVars[1:], kind: "string",
		usage: "job_name label (default $ELASTIC_JOB_NAME, then $JOB_NAME)",
		set:   func(c *Config, v string) error { c.JobName = v; return nil }},
	{env: identity.PodLabelVars[0], flag: "pod-name", fallbacks: identity.PodLabelVars[1:], kind: "string",
		usage: "pod_name label (default $POD_NAME, then $KUBERNETES_POD_NAME, then $HOSTNAME)",
		set:   func(c *Config, v string) error { c.PodName = v; return nil }},
	{env: identity.IPVars[0], flag: "ip", fallbacks: identity.IPVars[1:], kind: "string",
		usage: "ip label (default $POD_IP)",
		set:   func(c *Config, v string) error { c.IP = v; return nil }},
}

// parseSeconds accepts plain seconds ("300", "0.5") as xpu_timer does, and
// Go durations ("5s", "2m").
func parseSeconds(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f > float64(1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("%q: too large", v)
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("%q: want seconds (300) or a duration (5m)", v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: must be positive", v)
	}
	return d, nil
}

// parseAtLeast parses seconds or a duration (parseSeconds) of at least
// least; hint ends the error of a shorter one.
func parseAtLeast(v string, least time.Duration, hint string) (time.Duration, error) {
	d, err := parseSeconds(v)
	if err != nil {
		return 0, err
	}
	if d < least {
		return 0, fmt.Errorf("%q: under the %v minimum%s", v, least, hint)
	}
	return d, nil
}

// seconds spells a default duration the way the variables are written:
// whole seconds.
func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// parseBool accepts what strconv does plus yes/no/on/off.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true", "yes", "y", "on":
		return true, nil
	case "0", "f", "false", "no", "n", "off", "":
		return false, nil
	}
	return false, fmt.Errorf("%q: want true or false", v)
}

func parsePort(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("%q: want a port number 0-65535", v)
	}
	return n, nil
}

// parseBytes accepts a positive byte count, optionally with a KiB, MiB or
// GiB suffix (also K, M, G, Ki, Mi, Gi: all powers of 1024).
func parseBytes(v string) (int64, error) {
	t := strings.TrimSpace(v)
	shift := 0
	for _, u := range []struct {
		suffixes []string
		shift    int
	}{{[]string{"GiB", "Gi", "G"}, 30}, {[]string{"MiB", "Mi", "M"}, 20}, {[]string{"KiB", "Ki", "K"}, 10}} {
		for _, s := range u.suffixes {
			if n, ok := strings.CutSuffix(t, s); ok {
				t, shift = strings.TrimSpace(n), u.shift
				break
			}
		}
		if shift != 0 {
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("%q: want a positive number of bytes (268435456, 256MiB)", v)
	}
	return n << shift, nil
}
