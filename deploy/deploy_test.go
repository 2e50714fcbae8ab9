package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		privileged.Skip(t, "promtool not installed (Debian package prometheus, scripts/apt-packages.txt)")
	}
	return p
}

func TestAlertRules(t *testing.T) {
	p := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
		{"check", "config", "prometheus.yml"},
	} {
		cmd := exec.Command(p, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// servedFamilies returns the names of every family the exporter serves for
// a snapshot that exercises all of them.
func servedFamilies(t *testing.T) map[string]bool {
	t.Helper()
	d := metrics.Durations{Count: 1, Sum: 1, Buckets: []metrics.Bucket{{UpperBound: 1, Count: 1}}}
	x := metrics.New(metrics.Static{})
	x.SetSource(func() metrics.Snapshot {
		return metrics.Snapshot{
			Xids: []dumpfile.Xid{{Xid: 79, Time: time.Unix(1, 0)}},
			Ranks: []metrics.Rank{{
				Kernels:     []metrics.Kernel{{Name: "k", Operation: "Matmul", Durations: d}},
				Collectives: []metrics.Collective{{Operation: "AllReduce", Durations: d}},
				GPU:         &dumpfile.GPU{},
				Comms:       []metrics.Comm{{ID: "9c1e04a1b2c3d4e5"}},
				Lags:        []metrics.Lag{{Comm: "9c1e04a1b2c3d4e5", Activity: "python", Lagging: true}},
				Activity:    &metrics.Activity{Kind: "python"},
			}},
		}
	})
	mfs, err := x.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	return names
}

var metricRef = regexp.MustCompile(`\b(xpu_timer_[a-z_]+|XPU_TIMER_[A-Z_]+|up)\b`)

// checkRefs fails t for every metric name in expr the exporter does not serve.
func checkRefs(t *testing.T, where, expr string, served map[string]bool) int {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	for _, r := range refs {
		if !served[r] {
			t.Errorf("%s: %q references %s, which the exporter does not serve", where, expr, r)
		}
	}
	return len(refs)
}

func TestAlertRulesUseServedMetrics(t *testing.T) {
	data, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	served := servedFamilies(t)
	var alerts []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			alerts = append(alerts, name)
			if checkRefs(t, name, r.Expr, served) == 0 {
				t.Errorf("%s: no metric in %q", name, r.Expr)
			}
		}
	}
	for _, want := range []string{"XpuTimerRankHung", "XpuTimerJobPartlyHung", "XpuTimerProbesLosingEvents", "XpuTimerAgentDown", "XpuTimerRankLagging"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}
}

func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/xpu-timer.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string
		UID    string
		Panels []struct {
			ID      int
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("trailing data after the dashboard object")
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard lacks title, uid or panels: %+v", d)
	}
	served := servedFamilies(t)
	ids := map[int]bool{}
	var titles []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("duplicate panel id %d", p.ID)
		}
		ids[p.ID] = true
		titles = append(titles, strings.ToLower(p.Title))
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if checkRefs(t, p.Title, tg.Expr, served) == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
			}
		}
	}
	for _, want := range []string{"hang state", "oldest", "bus bandwidth", "kernel latency", "lost", "dump", "lagging", "collective wait"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no panel about %q in %v", want, titles)
		}
	}
}

// manifests decodes every YAML document of a file.
func manifests(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
	return docs
}

// get walks a decoded YAML tree: keys for maps, ints for lists.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func envNames(container any) []string {
	var names []string
	env, _ := get(container, "env").([]any)
	for _, e := range env {
		if n, ok := get(e, "name").(string); ok {
			names = append(names, n)
		}
	}
	return names
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		out = append(out, x.(string))
	}
	return out
}

func TestDaemonSet(t *testing.T) {
	var ds map[string]any
	for _, d := range manifests(t, "kubernetes/daemonset.yaml") {
		if d["kind"] == "DaemonSet" {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	spec := get(ds, "spec", "template", "spec")
	if get(spec, "hostPID") != true {
		t.Error("hostPID must be true: the agent traces other pods' processes")
	}
	c := get(spec, "containers", 0)
	if cmd := strs(get(c, "command")); !slices.Equal(cmd, []string{"xpu-timer", "agent"}) {
		t.Errorf("command %v", cmd)
	}
	sc := get(c, "securityContext")
	if get(sc, "privileged") == true {
		t.Error("the agent must not be privileged")
	}
	if drop := strs(get(sc, "capabilities", "drop")); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("drop %v, want [ALL]", drop)
	}
	add := strs(get(sc, "capabilities", "add"))
	slices.Sort(add)
	if want := []string{"BPF", "PERFMON", "SYS_PTRACE", "SYS_RESOURCE"}; !slices.Equal(add, want) {
		t.Errorf("capabilities %v, want exactly %v", add, want)
	}
	if p := get(c, "ports", 0, "containerPort"); p != 18889 {
		t.Errorf("metrics port %v", p)
	}
	if !slices.Contains(envNames(c), "XPU_TIMER_TIMELINE_PATH") {
		t.Error("XPU_TIMER_TIMELINE_PATH not set")
	}
	if get(c, "volumeMounts", 0, "mountPath") != "/root/timeline" {
		t.Error("timeline volume not mounted at /root/timeline")
	}
}

func TestTrainingPod(t *testing.T) {
	docs := manifests(t, "kubernetes/training-pod.yaml")
	if len(docs) != 1 || docs[0]["kind"] != "Pod" {
		t.Fatalf("want one Pod, got %d documents", len(docs))
	}
	c := get(docs[0], "spec", "containers", 0)
	if cmd := strs(get(c, "command")); !slices.Equal(cmd, []string{"xpu_timer_launch"}) {
		t.Errorf("command %v, want the launch wrapper", cmd)
	}
	if args := strs(get(c, "args")); len(args) == 0 || args[0] != "torchrun" {
		t.Errorf("args %v, want torchrun ...", args)
	}
	env := envNames(c)
	for _, want := range []string{"XPU_TIMER_HANG_TIMEOUT", "XPU_TIMER_TIMELINE_PATH", "XPU_TIMER_PORT", "POD_NAME", "POD_IP"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %s missing", want)
		}
	}
}
