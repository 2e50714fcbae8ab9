package testutil

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// FreeAddr returns a loopback address with a port free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Service starts a server program for the test; it is killed when the test
// ends, and its output is logged if the test failed.
func Service(t testing.TB, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), out.String())
		}
	})
}

// Ready waits up to 30 s for a server's readiness endpoint to answer 200.
func Ready(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30s", url)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Prometheus runs Prometheus (bin) on loopback with its data in dir,
// scraping target (host:port) and evaluating the rules file every second,
// and returns its address once it is ready.
func Prometheus(t testing.TB, bin, dir, rules, target string) string {
	t.Helper()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: xpu-timer
    static_configs:
      - targets: [%q]
`, rules, target)
	return PrometheusConfig(t, bin, dir, cfg)
}

// PrometheusConfig runs Prometheus (bin) on loopback with its data in dir
// and the configuration cfg (prometheus.yml's text), and returns its
// address once it is ready.
func PrometheusConfig(t testing.TB, bin, dir, cfg string) string {
	t.Helper()
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	Service(t, bin, "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	Ready(t, "http://"+addr+"/-/ready")
	return addr
}
