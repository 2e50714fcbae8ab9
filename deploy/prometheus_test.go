package deploy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timer"
)

// TestPrometheusScrapesExporter runs Debian's Prometheus on loopback against
// our exporter serving a job whose rank 1 is hung, with alerts.yml loaded,
// and waits until the rank and partly-hung alerts are active (pending: their
// "for" is minutes) for exactly the hung rank.
func TestPrometheusScrapesExporter(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		privileged.Skip(t, "prometheus not installed (scripts/apt-packages.txt)")
	}
	x := metrics.New(metrics.Static{IP: "127.0.0.1", JobName: "llama", PodName: "llama-0"})
	x.SetSource(func() metrics.Snapshot {
		return metrics.Snapshot{Ranks: []metrics.Rank{
			{Rank: 0, LocalRank: 0},
			{Rank: 1, LocalRank: 1, Hung: true, HangKind: timer.HangGPU, OldestAgeSeconds: 400},
		}}
	})
	target := httptest.NewServer(x.Handler())
	defer target.Close()

	rules, err := filepath.Abs("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	addr := testutil.Prometheus(t, bin, t.TempDir(), rules, strings.TrimPrefix(target.URL, "http://"))

	type alert struct {
		Labels map[string]string
		State  string
	}
	var alerts []alert
	for {
		alerts = nil
		resp, err := http.Get("http://" + addr + "/api/v1/alerts")
		if err == nil {
			var body struct{ Data struct{ Alerts []alert } }
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			alerts = body.Data.Alerts
		}
		var rank, partly bool
		for _, a := range alerts {
			switch a.Labels["alertname"] {
			case "XpuTimerRankHung":
				if a.Labels["rank"] != "1" || a.Labels["kind"] != "gpu" || a.Labels["job_name"] != "llama" {
					t.Fatalf("rank alert for the wrong series: %v", a.Labels)
				}
				rank = true
			case "XpuTimerJobPartlyHung":
				partly = a.Labels["job_name"] == "llama"
			case "XpuTimerAgentDown", "XpuTimerAgentAbsent":
				// Pending until the first scrape lands; never firing here.
				if a.State == "firing" {
					t.Fatalf("unexpected alert %v", a.Labels)
				}
			case "XpuTimerProbesLosingEvents", "XpuTimerGpuXid":
				t.Fatalf("unexpected alert %v", a.Labels)
			}
		}
		if rank && partly {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts not active within 60s: %+v", alerts) // the output is logged on failure
		}
		time.Sleep(200 * time.Millisecond)
	}
}
