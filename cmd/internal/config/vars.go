// Package config resolves the XPU_TIMER_* settings of the launcher and the
// agent. Every variable also has a command-line flag; a value is taken from,
// in order: the flag, the environment, the XPU_TIMER_CONFIG file, then the
// default. The label identity (job, pod, ip) defaults to what the platform
// sets (DLRover's ELASTIC_JOB_NAME, the Kubernetes downward API's POD_NAME and
// POD_IP) when no XPU_TIMER_* value names it.
package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Config is the resolved configuration.
type Config struct {
	HangTimeout  time.Duration // XPU_TIMER_HANG_TIMEOUT, default timer.DefaultHangTimeout
	TimelinePath string        // XPU_TIMER_TIMELINE_PATH, default agent.DefaultTimelinePath
	HangKill     bool          // XPU_TIMER_HANG_KILL
	Port         int           // XPU_TIMER_PORT, default BasePort+1
	BasePort     int           // XPU_TIMER_BASEPORT, default DefaultBasePort
	ConfigFile   string        // XPU_TIMER_CONFIG
	LoggingDir   string        // XPU_TIMER_LOGGING_DIR; "stdout" logs to stdout, "" to stderr
	DebugMode    bool          // XPU_TIMER_DEBUG_MODE

	Pushgateway  string        // XPU_TIMER_PUSHGATEWAY: Pushgateway URL, "" disables pushing
	PushInterval time.Duration // XPU_TIMER_PUSH_INTERVAL, default metrics.DefaultPushInterval: re-push period while hung
	Libraries    []string      // XPU_TIMER_LIBRARIES: extra vendor library paths

	JobName string // XPU_TIMER_JOB_NAME, else ELASTIC_JOB_NAME, else JOB_NAME
	PodName string // XPU_TIMER_POD_NAME, else POD_NAME, else HOSTNAME
	IP      string // XPU_TIMER_IP, else POD_IP
}

// DefaultBasePort is the base port of DLRover's xpu_timer; the metrics
// port is the one after it. The other defaults belong to the packages that
// use them: timer.DefaultHangTimeout, agent.DefaultTimelinePath,
// metrics.DefaultPushInterval.
const DefaultBasePort = 18888

// variable describes one setting: its names, default and how it is parsed.
type variable struct {
	env       string   // XPU_TIMER_* name, also the key in the config file
	flag      string   // flag name without dashes
	def       string   // default value ("" for none)
	fallbacks []string // platform variables consulted in place of the default
	kind      string   // pflag type name: "duration", "bool", "int", "string", "strings"
	usage     string
	set       func(c *Config, v string) error
}

// variables lists every setting; the order is the order of flags and of
// printed settings.
var variables = []variable{
	{env: "XPU_TIMER_HANG_TIMEOUT", flag: "hang-timeout", def: seconds(timer.DefaultHangTimeout), kind: "duration",
		usage: "how long GPU work may stay outstanding before the rank counts as hung (seconds, or a duration like 5s)",
		set: func(c *Config, v string) (err error) {
			c.HangTimeout, err = parseSeconds(v)
			return err
		}},
	{env: "XPU_TIMER_TIMELINE_PATH", flag: "timeline-path", def: agent.DefaultTimelinePath, kind: "string",
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
	{env: "XPU_TIMER_JOB_NAME", flag: "job-name", fallbacks: []string{"ELASTIC_JOB_NAME", "JOB_NAME"}, kind: "string",
		usage: "job_name label (default $ELASTIC_JOB_NAME, then $JOB_NAME)",
		set:   func(c *Config, v string) error { c.JobName = v; return nil }},
	{env: "XPU_TIMER_POD_NAME", flag: "pod-name", fallbacks: []string{"POD_NAME", "HOSTNAME"}, kind: "string",
		usage: "pod_name label (default $POD_NAME, then $HOSTNAME)",
		set:   func(c *Config, v string) error { c.PodName = v; return nil }},
	{env: "XPU_TIMER_IP", flag: "ip", fallbacks: []string{"POD_IP"}, kind: "string",
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
