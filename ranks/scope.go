package ranks

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/ranks/identity"
)

// Scope chooses the processes the node loop makes ranks of (the agent's
// --namespaces, --pod-regex, --pod-uids and --command-regex). Every filter
// set must admit a process; the zero Scope admits all.
//
// What each filter can see:
//   - the namespace and the pod name are not in a process's cgroup, only
//     its pod's UID: they come from its environment, the variables of
//     NamespaceVars and identity.PodNameVars, which the pod spec sets from the
//     downward API (fieldRef metadata.namespace, metadata.name). A process
//     whose environment names none is outside a Namespaces or Pod filter,
//     and Admit says why. HOSTNAME is not taken: with hostNetwork (usual
//     for RDMA) it is the node's name.
//   - the pod UID comes from /proc/PID/cgroup (procfs.ParseCgroup: the
//     kubelet names a pod's cgroup after it), else from PodUIDVars. Seen
//     from a process outside Kubernetes, or through a cgroup namespace that
//     hides the kubepods tree, there is none.
//   - the command is the process's command line (arguments joined by
//     spaces) and its executable's path; the regexp may match either,
//     anywhere (anchor it with ^ and $).
type Scope struct {
	Namespaces []string       // Kubernetes namespaces, exactly; empty: any
	Pod        *regexp.Regexp // pod names; nil: any
	PodUIDs    []string       // pod UIDs, lower case with dashes; empty: any
	Command    *regexp.Regexp // command line or executable; nil: any
}

// The environment variables a Scope reads, first set wins; the pod's
// name is identity.PodNameVars.
var (
	NamespaceVars = []string{"POD_NAMESPACE", "KUBERNETES_POD_NAMESPACE"}
	PodUIDVars    = []string{"POD_UID", "KUBERNETES_POD_UID"}
)

// Process is what a Scope sees of one process (the agent reads it).
type Process struct {
	PID     int
	Env     map[string]string // nil when it could not be read
	Cgroup  procfs.Cgroup
	Cmdline []string
	Exe     string // the executable's path, "" when unreadable
}

// Empty says whether s admits every process.
func (s *Scope) Empty() bool {
	return s == nil || len(s.Namespaces) == 0 && s.Pod == nil && len(s.PodUIDs) == 0 && s.Command == nil
}

// Admit says whether p is in scope; when it is not, why says which filter
// left it out and what it saw, for one log line.
func (s *Scope) Admit(p Process) (ok bool, why string) {
	if s.Empty() {
		return true, ""
	}
	if len(s.Namespaces) > 0 {
		ns, from := first(p.Env, NamespaceVars)
		switch {
		case p.Env == nil:
			return false, "namespace filter: its environment could not be read"
		case from == "":
			return false, "namespace filter: its environment names no namespace (" + strings.Join(NamespaceVars, " or ") +
				", set from the downward API); " + where(p)
		case !slices.Contains(s.Namespaces, ns):
			return false, fmt.Sprintf("namespace %q (%s) is not one of %v", ns, from, s.Namespaces)
		}
	}
	if s.Pod != nil {
		pod, from := first(p.Env, identity.PodNameVars)
		switch {
		case p.Env == nil:
			return false, "pod filter: its environment could not be read"
		case from == "":
			return false, "pod filter: its environment names no pod (" + strings.Join(identity.PodNameVars, " or ") +
				", set from the downward API); " + where(p)
		case !s.Pod.MatchString(pod):
			return false, fmt.Sprintf("pod %q (%s) does not match %q", pod, from, s.Pod)
		}
	}
	if len(s.PodUIDs) > 0 {
		uid := podUID(p)
		switch {
		case uid == "":
			return false, "pod UID filter: neither its cgroup nor its environment names a pod; " + where(p)
		case !slices.Contains(s.PodUIDs, uid):
			return false, fmt.Sprintf("pod UID %s is not one of %v", uid, s.PodUIDs)
		}
	}
	if s.Command != nil {
		line := strings.Join(p.Cmdline, " ")
		if !s.Command.MatchString(line) && (p.Exe == "" || !s.Command.MatchString(p.Exe)) {
			return false, fmt.Sprintf("command %q (executable %q) does not match %q", line, p.Exe, s.Command)
		}
	}
	return true, ""
}

// podUID is p's pod UID: from its cgroup, else from its environment.
func podUID(p Process) string {
	if p.Cgroup.PodUID != "" {
		return p.Cgroup.PodUID
	}
	uid, _ := first(p.Env, PodUIDVars)
	return strings.ToLower(uid)
}

// where says what is known of p's place: in which pod, or why none.
func where(p Process) string {
	_, k8s := p.Env["KUBERNETES_SERVICE_HOST"]
	switch uid := podUID(p); {
	case uid != "":
		return "it runs in pod UID " + uid
	case k8s:
		return "its environment has KUBERNETES_SERVICE_HOST, but its cgroup (" + p.Cgroup.Path + ") names no pod"
	}
	return "it does not look like a Kubernetes pod's process (no pod in its cgroup, no KUBERNETES_SERVICE_HOST)"
}

// first returns the value of the first of keys set in env, and that key.
func first(env map[string]string, keys []string) (val, key string) {
	for _, k := range keys {
		if v := env[k]; v != "" {
			return v, k
		}
	}
	return "", ""
}
