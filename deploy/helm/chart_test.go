package helm

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/daemonset.yaml from the chart")

const (
	chartDir  = "xpu-timer"
	namespace = "xpu-timer"
)

// valueSets are the configurations every test renders: the defaults, and
// each optional part switched on.
var valueSets = map[string]map[string]any{
	"defaults":        {},
	"shared timeline": {"timeline": map[string]any{"persistentVolumeClaim": map[string]any{"enabled": true, "storageClassName": "nfs"}}},
	"existing claim":  {"timeline": map[string]any{"persistentVolumeClaim": map[string]any{"enabled": true, "existingClaim": "shared-timeline"}}},
	"everything": {
		"namespace":  map[string]any{"create": true},
		"podMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
		"metrics":    map[string]any{"webConfigSecret": "xpu-timer-web"},
		"agent": map[string]any{"pushgateway": "http://pgw:9091", "libraries": []any{"/opt/vendor/libfoo.so"},
			"extraArgs": []any{"--debug-mode"}, "extraEnv": []any{map[string]any{"name": "GOMEMLIMIT", "value": "900MiB"}},
			"scope": map[string]any{"namespaces": []any{"train", "research"}, "podRegex": "^llama-", "podUIDs": []any{"1f3c9a8e-2b7d-4e61-9c0a-5d8e7f6a4b21"},
				"commandRegex": `train\.py`},
			"retention": map[string]any{"count": 3, "bytes": "20GiB", "age": "7d"}},
		"alerts":         map[string]any{"jobName": "gpu-agents", "jobSelector": `job="gpu-agents"`, "runbookBaseURL": "https://wiki.example.com/xpu-timer"},
		"serviceAccount": map[string]any{"name": "xpu"},
	},
}

func TestLint(t *testing.T) {
	for name, vals := range valueSets {
		l := lint.All(chartDir, copyValues(t, vals), namespace, false)
		for _, m := range l.Messages {
			// helm lint --strict: warnings fail too.
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: %s", name, m)
			}
		}
	}
}

// render is `helm template xpu-timer deploy/helm/xpu-timer -n xpu-timer`.
func render(t *testing.T, vals map[string]any) string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals = copyValues(t, vals) // Helm fills in the map it is given
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace, inst.IncludeCRDs = true, true, true, true
	inst.ReleaseName, inst.Namespace = "xpu-timer", namespace
	rel, err := inst.Run(ch, vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return rel.Manifest
}

func copyValues(t *testing.T, vals map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// objects are the rendered objects, decoded strictly by kind.
type objects struct {
	ns   []corev1.Namespace
	sa   []corev1.ServiceAccount
	ds   []appsv1.DaemonSet
	pvc  []corev1.PersistentVolumeClaim
	rule []monv1.PrometheusRule
	pm   []monv1.PodMonitor
	pod  []corev1.Pod
}

// decode decodes every document of a manifest into its type; a field the
// type does not know, a duplicate field or an unknown kind fails.
func decode(manifest string) (objects, error) {
	var o objects
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return o, err
		}
		if tm.APIVersion == "" && tm.Kind == "" && onlyComments(doc) {
			continue
		}
		var err error
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			o.ns, err = strict(doc, o.ns)
		case "v1 ServiceAccount":
			o.sa, err = strict(doc, o.sa)
		case "apps/v1 DaemonSet":
			o.ds, err = strict(doc, o.ds)
		case "v1 PersistentVolumeClaim":
			o.pvc, err = strict(doc, o.pvc)
		case "v1 Pod":
			o.pod, err = strict(doc, o.pod)
		case "monitoring.coreos.com/v1 PrometheusRule":
			o.rule, err = strict(doc, o.rule)
		case "monitoring.coreos.com/v1 PodMonitor":
			o.pm, err = strict(doc, o.pm)
		default:
			err = &unknownKind{tm.APIVersion + " " + tm.Kind}
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// onlyComments says whether a YAML document holds nothing but comments.
func onlyComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

type unknownKind struct{ kind string }

func (u *unknownKind) Error() string { return "no type for " + u.kind }

// strict decodes as the API server does: field names match exactly, and
// unknown or duplicate fields fail.
func strict[T any](doc string, list []T) ([]T, error) {
	data, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return list, err
	}
	var v T
	errs, err := kjson.UnmarshalStrict(data, &v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return list, err
	}
	if len(errs) > 0 {
		return list, errors.Join(errs...)
	}
	return append(list, v), nil
}

func TestStrictDecodingFails(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec: {template: {spec: {hostPid: true}}}\n", // case matters
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec: {template: {spec: {hostPIDs: true}}}\n",
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\nautomountToken: false\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec: {groups: [{name: g, rules: [{alert: A, expr: up, runbook: x}]}]}\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n",
	} {
		if _, err := decode(doc); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
}

func TestTemplate(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			o, err := decode(render(t, vals))
			if err != nil {
				t.Fatal(err)
			}
			if len(o.ds) != 1 || len(o.sa) != 1 {
				t.Fatalf("%d DaemonSets, %d ServiceAccounts", len(o.ds), len(o.sa))
			}
			ds, sa := o.ds[0], o.sa[0]
			pod := ds.Spec.Template.Spec
			if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken ||
				pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("a service account token is mounted")
			}
			if pod.ServiceAccountName != sa.Name || ds.Namespace != namespace || sa.Namespace != namespace {
				t.Errorf("pod runs as %q in %q, service account %q in %q", pod.ServiceAccountName, ds.Namespace, sa.Name, sa.Namespace)
			}
			if !pod.HostPID || len(pod.Containers) != 1 {
				t.Fatal("hostPID off or not one container")
			}
			c := pod.Containers[0]
			if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || *c.SecurityContext.Privileged {
				t.Error("the agent must not be privileged")
			}
			if c.Resources.Limits.Memory().String() != "1Gi" {
				t.Errorf("memory limit %v", c.Resources.Limits.Memory())
			}
			if !reflect.DeepEqual(ds.Spec.Selector.MatchLabels, subset(ds.Spec.Template.Labels, ds.Spec.Selector.MatchLabels)) {
				t.Error("the selector does not select the pods")
			}
			var timeline *corev1.Volume
			for i := range pod.Volumes {
				if pod.Volumes[i].Name == "timeline" {
					timeline = &pod.Volumes[i]
				}
			}
			pvc, _ := vals["timeline"].(map[string]any)
			switch claim, _ := pvc["persistentVolumeClaim"].(map[string]any); {
			case claim == nil:
				if timeline.HostPath == nil || timeline.HostPath.Path != "/root/timeline" || len(o.pvc) != 0 {
					t.Errorf("timeline %+v, %d claims; want the hostPath", timeline, len(o.pvc))
				}
			case claim["existingClaim"] != nil:
				if timeline.PersistentVolumeClaim == nil || timeline.PersistentVolumeClaim.ClaimName != "shared-timeline" || len(o.pvc) != 0 {
					t.Errorf("timeline %+v, %d claims; want the existing claim", timeline, len(o.pvc))
				}
			default:
				if len(o.pvc) != 1 || timeline.PersistentVolumeClaim == nil || timeline.PersistentVolumeClaim.ClaimName != o.pvc[0].Name ||
					!slices.Equal(o.pvc[0].Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
					t.Errorf("timeline %+v, claims %+v; want a new ReadWriteMany claim", timeline, o.pvc)
				}
			}
			checkScope(t, c, name == "everything")
			if len(o.rule) != 1 {
				t.Fatalf("%d PrometheusRules", len(o.rule))
			}
			checkRules(t, o.rule[0], vals)
			if name == "everything" {
				checkEverything(t, o)
			} else if len(o.ns) != 0 || len(o.pm) != 0 {
				t.Errorf("%d namespaces, %d PodMonitors by default", len(o.ns), len(o.pm))
			}
		})
	}
}

// checkScope checks the filter and retention variables: none but the
// retention defaults unless set, the values as given when set.
func checkScope(t *testing.T, c corev1.Container, set bool) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	want := map[string]string{"XPU_TIMER_RETAIN_COUNT": "10", "XPU_TIMER_RETAIN_BYTES": "0", "XPU_TIMER_RETAIN_AGE": "0"}
	if set {
		want = map[string]string{"XPU_TIMER_RETAIN_COUNT": "3", "XPU_TIMER_RETAIN_BYTES": "20GiB", "XPU_TIMER_RETAIN_AGE": "7d",
			"XPU_TIMER_NAMESPACES": "train,research", "XPU_TIMER_POD_REGEX": "^llama-",
			"XPU_TIMER_POD_UIDS": "1f3c9a8e-2b7d-4e61-9c0a-5d8e7f6a4b21", "XPU_TIMER_COMMAND_REGEX": `train\.py`}
	}
	for _, k := range []string{"XPU_TIMER_NAMESPACES", "XPU_TIMER_POD_REGEX", "XPU_TIMER_POD_UIDS", "XPU_TIMER_COMMAND_REGEX",
		"XPU_TIMER_RETAIN_COUNT", "XPU_TIMER_RETAIN_BYTES", "XPU_TIMER_RETAIN_AGE"} {
		got, ok := env[k]
		if w, wok := want[k]; ok != wok || got != w {
			t.Errorf("%s = %q (set %v), want %q (set %v)", k, got, ok, w, wok)
		}
	}
}

func subset(m, keys map[string]string) map[string]string {
	out := map[string]string{}
	for k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// checkRules compares the PrometheusRule with deploy/prometheus/alerts.yml:
// the same groups, with the selector and runbook of the values.
func checkRules(t *testing.T, r monv1.PrometheusRule, vals map[string]any) {
	t.Helper()
	data, err := os.ReadFile("../prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := vals["alerts"].(map[string]any); a != nil {
		data = bytes.ReplaceAll(data, []byte(`job="xpu-timer"`), []byte(a["jobSelector"].(string)))
		data = bytes.ReplaceAll(data, []byte("https://github.com/xpu-timer/xpu-timer/blob/main/docs/runbook.md"), []byte(a["runbookBaseURL"].(string)))
	}
	var want monv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(data, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Spec, want) {
		got, _ := yaml.Marshal(r.Spec)
		t.Errorf("PrometheusRule spec differs from alerts.yml:\n%s", got)
	}
	n := 0
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				continue // a recording rule
			}
			n++
			if !strings.Contains(rule.Annotations["runbook_url"], "#"+strings.ToLower(rule.Alert)) {
				t.Errorf("%s: runbook_url %q", rule.Alert, rule.Annotations["runbook_url"])
			}
		}
	}
	if n < 6 {
		t.Errorf("%d rules", n)
	}
}

func checkEverything(t *testing.T, o objects) {
	t.Helper()
	if len(o.ns) != 1 || o.ns[0].Name != namespace || o.ns[0].Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespaces %+v, want %s labelled privileged", o.ns, namespace)
	}
	if len(o.pm) != 1 {
		t.Fatalf("%d PodMonitors", len(o.pm))
	}
	pm := o.pm[0]
	ep := pm.Spec.PodMetricsEndpoints[0]
	if pm.Labels["release"] != "kube-prometheus" || ep.Port == nil || *ep.Port != "metrics" ||
		len(ep.RelabelConfigs) != 1 || ep.RelabelConfigs[0].TargetLabel != "job" || ep.RelabelConfigs[0].Replacement == nil || *ep.RelabelConfigs[0].Replacement != "gpu-agents" {
		t.Errorf("PodMonitor %+v", pm)
	}
	if !reflect.DeepEqual(pm.Spec.Selector.MatchLabels, subset(o.ds[0].Spec.Template.Labels, pm.Spec.Selector.MatchLabels)) {
		t.Error("the PodMonitor does not select the agent's pods")
	}
	c := o.ds[0].Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["XPU_TIMER_WEB_CONFIG_FILE"] != "/etc/xpu-timer/web/web.yml" || env["XPU_TIMER_PUSHGATEWAY"] != "http://pgw:9091" ||
		env["XPU_TIMER_LIBRARIES"] != "/opt/vendor/libfoo.so" || env["GOMEMLIMIT"] != "900MiB" || !slices.Contains(c.Args, "--debug-mode") {
		t.Errorf("env %v args %v", env, c.Args)
	}
	if c.ReadinessProbe.TCPSocket == nil {
		t.Error("with TLS and basic auth the probe must not be an HTTP GET")
	}
	if o.sa[0].Name != "xpu" {
		t.Errorf("service account %q", o.sa[0].Name)
	}
}

// The plain manifests: daemonset.yaml is the chart rendered with its
// namespace and without the PrometheusRule (go test -update rewrites it);
// training-pod.yaml passes the same strict decoding.
func TestPlainManifests(t *testing.T) {
	got := "# Generated from deploy/helm/xpu-timer by `go test ./helm -update` in deploy/:\n" +
		"#   helm template xpu-timer deploy/helm/xpu-timer -n xpu-timer --set namespace.create=true,prometheusRule.enabled=false\n" +
		"# Edit the chart, not this file.\n" +
		render(t, map[string]any{"namespace": map[string]any{"create": true}, "prometheusRule": map[string]any{"enabled": false}})
	const file = "../kubernetes/daemonset.yaml"
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the chart's rendering: run go test ./helm -update in deploy/", file)
	}
	for _, f := range []string{file, "../kubernetes/training-pod.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decode(string(data)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
