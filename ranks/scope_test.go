package ranks

import (
	"regexp"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

const testUID = "1f3c9a8e-2b7d-4e61-9c0a-5d8e7f6a4b21"

func TestScopeAdmit(t *testing.T) {
	inPod := procfs.Cgroup{Path: "/kubepods/burstable/pod" + testUID + "/abc", PodUID: testUID, Kubepods: true}
	k8sEnv := map[string]string{"POD_NAMESPACE": "train", "POD_NAME": "llama-worker-3", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
	train := []string{"/usr/bin/python3", "-u", "train.py", "--lr", "3e-4"}
	for _, tc := range []struct {
		name  string
		scope *Scope
		p     Process
		ok    bool
		why   string // a part of the reason when not ok
	}{
		{name: "nil scope admits all", scope: nil, p: Process{}, ok: true},
		{name: "empty scope admits all", scope: &Scope{}, p: Process{}, ok: true},
		{name: "namespace listed", scope: &Scope{Namespaces: []string{"dev", "train"}}, p: Process{Env: k8sEnv}, ok: true},
		{name: "namespace from the second variable", scope: &Scope{Namespaces: []string{"train"}},
			p: Process{Env: map[string]string{"KUBERNETES_POD_NAMESPACE": "train"}}, ok: true},
		{name: "namespace not listed", scope: &Scope{Namespaces: []string{"dev"}}, p: Process{Env: k8sEnv}, why: `namespace "train" (POD_NAMESPACE) is not one of [dev]`},
		{name: "namespace unknown, in a pod", scope: &Scope{Namespaces: []string{"train"}},
			p: Process{Env: map[string]string{"RANK": "0"}, Cgroup: inPod}, why: "names no namespace (POD_NAMESPACE or KUBERNETES_POD_NAMESPACE, set from the downward API); it runs in pod UID " + testUID},
		{name: "namespace unknown, k8s env without pod cgroup", scope: &Scope{Namespaces: []string{"train"}},
			p: Process{Env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, Cgroup: procfs.Cgroup{Path: "/"}}, why: "has KUBERNETES_SERVICE_HOST, but its cgroup (/) names no pod"},
		{name: "namespace unknown, no pod", scope: &Scope{Namespaces: []string{"train"}}, p: Process{Env: map[string]string{}}, why: "does not look like a Kubernetes pod's process"},
		{name: "namespace, environment unreadable", scope: &Scope{Namespaces: []string{"train"}}, p: Process{}, why: "could not be read"},
		{name: "HOSTNAME is no pod name", scope: &Scope{Pod: regexp.MustCompile("^node-")}, p: Process{Env: map[string]string{"HOSTNAME": "node-7"}}, why: "names no pod"},
		{name: "pod name from our variable", scope: &Scope{Pod: regexp.MustCompile(`^llama-`)}, p: Process{Env: map[string]string{"XPU_TIMER_POD_NAME": "llama-worker-3"}}, ok: true},
		{name: "pod matches", scope: &Scope{Pod: regexp.MustCompile(`^llama-worker-\d+$`)}, p: Process{Env: k8sEnv}, ok: true},
		{name: "pod does not match", scope: &Scope{Pod: regexp.MustCompile(`^gpt-`)}, p: Process{Env: k8sEnv}, why: `pod "llama-worker-3" (POD_NAME) does not match "^gpt-"`},
		{name: "pod UID from cgroup", scope: &Scope{PodUIDs: []string{testUID}}, p: Process{Cgroup: inPod}, ok: true},
		{name: "pod UID from environment", scope: &Scope{PodUIDs: []string{testUID}}, p: Process{Env: map[string]string{"POD_UID": strings.ToUpper(testUID)}}, ok: true},
		{name: "cgroup wins over environment", scope: &Scope{PodUIDs: []string{testUID}},
			p: Process{Env: map[string]string{"POD_UID": "00000000-0000-0000-0000-000000000000"}, Cgroup: inPod}, ok: true},
		{name: "pod UID other", scope: &Scope{PodUIDs: []string{"00000000-0000-0000-0000-000000000000"}}, p: Process{Cgroup: inPod}, why: "pod UID " + testUID + " is not one of"},
		{name: "pod UID none", scope: &Scope{PodUIDs: []string{testUID}}, p: Process{Env: map[string]string{}}, why: "neither its cgroup nor its environment names a pod"},
		{name: "command line matches", scope: &Scope{Command: regexp.MustCompile(`train\.py`)}, p: Process{Cmdline: train}, ok: true},
		{name: "executable matches", scope: &Scope{Command: regexp.MustCompile(`^/opt/conda/bin/python`)}, p: Process{Cmdline: []string{"python", "x.py"}, Exe: "/opt/conda/bin/python3.11"}, ok: true},
		{name: "command does not match", scope: &Scope{Command: regexp.MustCompile(`^torchrun`)}, p: Process{Cmdline: train, Exe: "/usr/bin/python3.11"},
			why: `command "/usr/bin/python3 -u train.py --lr 3e-4" (executable "/usr/bin/python3.11") does not match "^torchrun"`},
		{name: "command unreadable", scope: &Scope{Command: regexp.MustCompile(`.`)}, p: Process{}, why: "does not match"},
		{name: "every filter must admit", scope: &Scope{Namespaces: []string{"train"}, Command: regexp.MustCompile(`eval\.py`)}, p: Process{Env: k8sEnv, Cmdline: train}, why: "does not match"},
		{name: "all filters admit", scope: &Scope{Namespaces: []string{"train"}, Pod: regexp.MustCompile("llama"), PodUIDs: []string{testUID}, Command: regexp.MustCompile(`train\.py`)},
			p: Process{Env: k8sEnv, Cgroup: inPod, Cmdline: train}, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := tc.scope.Admit(tc.p)
			if ok != tc.ok || !ok && !strings.Contains(why, tc.why) || ok && why != "" {
				t.Errorf("Admit = %v, %q; want %v, %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}
