package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// rankHungFor is the `for` of XpuTimerRankHung in the copy of the rules the
// test loads: the shipped minute would make the test wait a minute.
const rankHungFor = "2s"

// TestPrometheusAndPushgateway hangs a job under xpu_timer_launch while a
// real Prometheus scrapes its /metrics with the shipped alert rules (only
// XpuTimerRankHung's `for` shortened) and a real Pushgateway receives its
// hang events: the alert fires for the hung ranks, the gateway holds one
// group per hung rank (job and rank), and the groups go when the job ends.
func TestPrometheusAndPushgateway(t *testing.T) {
	privileged.Root(t)
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		privileged.Skip(t, "prometheus not installed (scripts/apt-packages.txt)")
	}
	gwBin, err := exec.LookPath("prometheus-pushgateway")
	if err != nil {
		privileged.Skip(t, "prometheus-pushgateway not installed (scripts/apt-packages.txt)")
	}
	b := testbed.Build(t)
	tmp := t.TempDir()

	gwAddr := testutil.FreeAddr(t)
	testutil.Service(t, gwBin, "--web.listen-address="+gwAddr, "--persistence.file=")
	testutil.Ready(t, "http://"+gwAddr+"/-/ready")

	const jobName = "e2e-prom"
	c := job{fault: testbed.FaultNCCLStall, rank: 1}
	p := launch(t, b, c, filepath.Join(tmp, "timeline"), timeout,
		"XPU_TIMER_PUSHGATEWAY=http://"+gwAddr, "XPU_TIMER_JOB_NAME="+jobName, "XPU_TIMER_PUSH_INTERVAL=1")
	target := strings.TrimSuffix(strings.TrimPrefix(p.metricsURL(30*time.Second), "http://"), "/metrics")

	promAddr := testutil.Prometheus(t, promBin, tmp, shortRules(t, tmp), target)

	// The alert fires for the faulty rank.
	hungAt := p.waitRe(hangRe, 60*time.Second).At
	var firing []map[string]string
	deadline := time.Now().Add(45 * time.Second)
	for len(firing) == 0 || !hasRank(firing, c.rank) {
		if time.Now().After(deadline) {
			t.Fatalf("XpuTimerRankHung not firing for rank %d; firing %v\n%s", c.rank, firing, p.output())
		}
		time.Sleep(500 * time.Millisecond)
		firing = alerts(t, promAddr, "XpuTimerRankHung", "firing")
	}
	t.Logf("XpuTimerRankHung firing %.1fs after the hang was decided (for: %s, 1s scrape and evaluation), for ranks %v",
		time.Since(hungAt).Seconds(), rankHungFor, ranksOf(firing))
	for _, a := range firing {
		if a["job_name"] != jobName || a["kind"] != "gpu" || a["severity"] != "critical" {
			t.Errorf("alert labels %v", a)
		}
	}

	// The gateway holds the hung ranks, one group each.
	var pushed map[string]float64
	deadline = time.Now().Add(15 * time.Second)
	for {
		pushed = map[string]float64{}
		for _, s := range parseText(mustScrape(t, "http://"+gwAddr+"/metrics")) {
			if s.name == "XPU_TIMER_COMMON_HANG" && s.labels["job"] == jobName {
				pushed[s.labels["rank"]] = s.value
			}
		}
		if pushed[fmt.Sprint(c.rank)] == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if pushed[fmt.Sprint(c.rank)] != 1 {
		t.Fatalf("the Pushgateway has no XPU_TIMER_COMMON_HANG 1 for job %s rank %d: %v", jobName, c.rank, pushed)
	}
	groups := gatewayGroups(t, gwAddr, jobName)
	t.Logf("Pushgateway groups of job %s: %v", jobName, groups)
	if !slicesContain(groups, fmt.Sprint(c.rank)) {
		t.Errorf("no group job=%s rank=%d: %v", jobName, c.rank, groups)
	}

	// The job ends: its groups go.
	p.end(20 * time.Second)
	if left := gatewayGroups(t, gwAddr, jobName); len(left) > 0 {
		t.Errorf("groups of job %s left on the Pushgateway after the job ended: %v", jobName, left)
	}
}

// shortRules writes the shipped rules with XpuTimerRankHung's `for` set to
// rankHungFor, every expression untouched, and returns the path.
func shortRules(t *testing.T, dir string) string {
	t.Helper()
	src, err := filepath.Abs("../../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string           `yaml:"name"`
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	found := false
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r["alert"] == "XpuTimerRankHung" {
				t.Logf("XpuTimerRankHung: expr %q, shipped for %v, here %s", r["expr"], r["for"], rankHungFor)
				r["for"] = rankHungFor
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("%s has no XpuTimerRankHung rule", src)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "alerts.yml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// promAlert is an alert as Prometheus's API lists it.
type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// promAlerts lists the active alerts of the Prometheus at addr (none
// while it cannot answer).
func promAlerts(t *testing.T, addr string) []promAlert {
	t.Helper()
	body, err := scrape("http://" + addr + "/api/v1/alerts")
	if err != nil {
		return nil
	}
	var resp struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("alerts API: %v: %s", err, body)
	}
	return resp.Data.Alerts
}

// alerts returns the labels of the alerts named name in state.
func alerts(t *testing.T, addr, name, state string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, a := range promAlerts(t, addr) {
		if a.Labels["alertname"] == name && a.State == state {
			out = append(out, a.Labels)
		}
	}
	return out
}

func hasRank(as []map[string]string, rank int) bool {
	return slicesContain(ranksOf(as), fmt.Sprint(rank))
}

func ranksOf(as []map[string]string) []string {
	var out []string
	for _, a := range as {
		out = append(out, a["rank"])
	}
	return out
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// gatewayGroups lists the rank grouping keys of job on the Pushgateway.
func gatewayGroups(t *testing.T, addr, job string) []string {
	t.Helper()
	body := mustScrape(t, "http://"+addr+"/api/v1/metrics")
	var resp struct {
		Data []struct {
			Labels map[string]string `json:"labels"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("pushgateway API: %v: %s", err, body)
	}
	var out []string
	for _, g := range resp.Data {
		if g.Labels["job"] == job {
			out = append(out, g.Labels["rank"])
		}
	}
	return out
}
