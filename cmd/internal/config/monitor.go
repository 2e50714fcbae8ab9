package config

import "github.com/xpu-timer/xpu-timer/agent"

// Monitor maps the configuration onto the node loop's options; the command
// adds its logger and callbacks.
func (c Config) Monitor() agent.MonitorOptions {
	return agent.MonitorOptions{
		Libraries:    c.Libraries,
		HangTimeout:  c.HangTimeout,
		TimelinePath: c.TimelinePath,
		HangKill:     c.HangKill,
		JobName:      c.JobName,
		PodName:      c.PodName,
		IP:           c.IP,
		Port:         c.Port,
		Pushgateway:  c.Pushgateway,
		PushInterval: c.PushInterval,
	}
}
