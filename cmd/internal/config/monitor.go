package config

import (
	"github.com/spf13/pflag"

	"github.com/xpu-timer/xpu-timer/agent"
)

// Monitor maps the configuration onto the node loop's options; the command
// adds its logger and callbacks.
func (c Config) Monitor() agent.MonitorOptions {
	return agent.MonitorOptions{
		Libraries:    c.Libraries,
		HangTimeout:  c.HangTimeout,
		TimelinePath: c.TimelinePath,
		HangKill:     c.HangKill,
		StallWatch:   c.StallWatch,
		JobName:      c.JobName,
		PodName:      c.PodName,
		IP:           c.IP,
		Port:         c.Port,
		Pushgateway:  c.Pushgateway,
		PushInterval: c.PushInterval,
		SymbolCache:  c.SymbolCacheBytes,
		RingBytes:    c.ProbeRingBytes,

		ListenAddresses: c.ListenAddresses(),
		WebConfigFile:   c.WebConfigFile,
		TopKernels:      c.TopKernels,

		Retain: c.Retention(),
		Scope:  c.Scope(),
	}
}

// Labels are the dump labels of the configuration.
func (c Config) Labels() agent.Labels {
	return agent.Labels{IP: c.IP, JobName: c.JobName, PodName: c.PodName}
}

// Environ resolves the configuration of a process with environment env,
// without flags: what the launcher would have used had it run that process.
func Environ(env map[string]string) (Config, error) {
	b := Bind(pflag.NewFlagSet("environ", pflag.ContinueOnError))
	b.lookup = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return b.Load()
}
