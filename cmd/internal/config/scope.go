package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/ranks"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// The retention settings (every command that dumps) and the node agent's
// process filters (agent only).
var (
	retainCount = variable{env: "XPU_TIMER_RETAIN_COUNT", flag: "retain-count", def: strconv.Itoa(timeline.DefaultRetainCount), kind: "int",
		usage: "earlier incarnations of each job kept under TIMELINE_PATH/incarnations, newest first (0: no limit); the current ones are never deleted",
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return fmt.Errorf("%q: want a count, 0 for no limit", v)
			}
			c.Retain.Count = n
			return nil
		}}
	retainBytes = variable{env: "XPU_TIMER_RETAIN_BYTES", flag: "retain-bytes", def: "0", kind: "bytes",
		usage: "bytes all earlier incarnations under TIMELINE_PATH/incarnations may take, oldest deleted first (or with a KiB, MiB, GiB suffix; 0: no limit)",
		set: func(c *Config, v string) (err error) {
			if strings.TrimSpace(v) == "0" {
				c.Retain.Bytes = 0
				return nil
			}
			c.Retain.Bytes, err = parseBytes(v)
			return err
		}}
	retainAge = variable{env: "XPU_TIMER_RETAIN_AGE", flag: "retain-age", def: "0", kind: "duration",
		usage: "age (of its newest file) past which an earlier incarnation under TIMELINE_PATH/incarnations is deleted (seconds, a duration like 72h, or days like 7d; 0: no limit)",
		set: func(c *Config, v string) (err error) {
			c.Retain.Age, err = parseAge(v)
			return err
		}}

	namespaces = variable{env: "XPU_TIMER_NAMESPACES", flag: "namespaces", kind: "strings", agent: true,
		usage: "follow only processes of these Kubernetes namespaces, comma-separated (from the process's POD_NAMESPACE or KUBERNETES_POD_NAMESPACE, set from the downward API)",
		set: func(c *Config, v string) error {
			var ns []string
			for _, n := range list(v) {
				if !dnsLabel.MatchString(n) {
					return fmt.Errorf("%q: not a Kubernetes namespace name", n)
				}
				ns = append(ns, n)
			}
			c.scope(func(s *ranks.Scope) { s.Namespaces = ns })
			return nil
		}}
	podRegex = variable{env: "XPU_TIMER_POD_REGEX", flag: "pod-regex", kind: "string", agent: true,
		usage: "follow only processes whose pod name matches this RE2 regexp, anywhere unless anchored (from the process's POD_NAME or KUBERNETES_POD_NAME)",
		set: func(c *Config, v string) error {
			re, err := compile(v)
			c.scope(func(s *ranks.Scope) { s.Pod = re })
			return err
		}}
	podUIDs = variable{env: "XPU_TIMER_POD_UIDS", flag: "pod-uids", kind: "strings", agent: true,
		usage: "follow only processes of these pod UIDs, comma-separated (from the process's cgroup, else its POD_UID)",
		set: func(c *Config, v string) error {
			var uids []string
			for _, u := range list(v) {
				n, ok := procfs.NormalPodUID(u)
				if !ok {
					return fmt.Errorf("%q: not a pod UID", u)
				}
				uids = append(uids, n)
			}
			c.scope(func(s *ranks.Scope) { s.PodUIDs = uids })
			return nil
		}}
	commandRegex = variable{env: "XPU_TIMER_COMMAND_REGEX", flag: "command-regex", kind: "string", agent: true,
		usage: "follow only processes whose command line (arguments joined by spaces) or executable path matches this RE2 regexp, anywhere unless anchored",
		set: func(c *Config, v string) error {
			re, err := compile(v)
			c.scope(func(s *ranks.Scope) { s.Command = re })
			return err
		}}
)

// scope applies one filter to c.Scope, which stays nil while no filter is
// set.
func (c *Config) scope(set func(*ranks.Scope)) {
	s := c.Scope
	if s == nil {
		s = &ranks.Scope{}
	}
	set(s)
	if s.Empty() {
		s = nil
	}
	c.Scope = s
}

// dnsLabel is a Kubernetes namespace name (an RFC 1123 label).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// list splits a comma-separated value, blanks dropped.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// compile compiles a filter's regexp; "" is no filter.
func compile(v string) (*regexp.Regexp, error) {
	if v == "" {
		return nil, nil
	}
	re, err := regexp.Compile(v)
	if err != nil {
		return nil, fmt.Errorf("%q: bad regexp: %w", v, err)
	}
	return re, nil
}

// parseAge accepts 0 (no limit), seconds, Go durations and whole days
// ("7d").
func parseAge(v string) (time.Duration, error) {
	t := strings.TrimSpace(v)
	if t == "0" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(t, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 || n > 100000 {
			return 0, fmt.Errorf("%q: want whole days (7d)", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return parseSeconds(v)
}
