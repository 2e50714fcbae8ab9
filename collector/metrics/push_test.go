package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// startPushgateway runs Debian's prometheus-pushgateway on a loopback port
// for the test and returns its URL.
func startPushgateway(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus-pushgateway")
	if err != nil {
		privileged.Skip(t, "prometheus-pushgateway not installed (scripts/apt-packages.txt)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// Debian defaults --persistence.file to a shared file under /var/lib:
	// keep this gateway in memory so runs never see each other's pushes.
	cmd := exec.Command(bin, "--web.listen-address="+addr, "--persistence.file=")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	url := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pushgateway at %s not ready: %v\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatewayHangLines returns the XPU_TIMER_COMMON_HANG lines the gateway serves.
func gatewayLines(t *testing.T, url, prefix string) []string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	return lines
}

// gatewayDrained is gatewayLines once they are gone, or after 5 s: the
// Pushgateway answers a DELETE with 202 and applies it a moment later.
func gatewayDrained(t *testing.T, url, prefix string) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := gatewayLines(t, url, prefix)
		if len(l) == 0 || time.Now().After(deadline) {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPusherAgainstPushgateway(t *testing.T) {
	url := startPushgateway(t)
	ctx := context.Background()
	p := NewPusher(url, testStatic, 10*time.Second)
	t0 := time.Unix(1700000000, 0)

	// Healthy: nothing is pushed.
	healthy := hungSnapshot()
	healthy.Ranks[1].Hung = false
	if err := p.Sync(ctx, t0, healthy); err != nil {
		t.Fatal(err)
	}
	if l := gatewayLines(t, url, "XPU_TIMER_COMMON_HANG"); len(l) != 0 {
		t.Fatalf("healthy job pushed %v", l)
	}

	// Rank 1 hangs: pushed at once, grouped by job and rank.
	if err := p.Sync(ctx, t0, hungSnapshot()); err != nil {
		t.Fatal(err)
	}
	lines := gatewayLines(t, url, "XPU_TIMER_COMMON_HANG")
	if len(lines) != 1 || !strings.Contains(lines[0], `job="llama"`) || !strings.Contains(lines[0], `rank="1"`) ||
		!strings.Contains(lines[0], `local_rank="1"`) || !strings.HasSuffix(lines[0], " 1") {
		t.Fatalf("after hang: %v", lines)
	}
	pushTime := func() string {
		l := gatewayLines(t, url, "xpu_timer_hang_push_timestamp_seconds")
		if len(l) != 1 {
			t.Fatalf("push timestamp lines %v", l)
		}
		return l[0][strings.LastIndexByte(l[0], ' ')+1:]
	}
	first := pushTime()

	// Within the interval: not pushed again; after it: pushed again.
	if err := p.Sync(ctx, t0.Add(5*time.Second), hungSnapshot()); err != nil {
		t.Fatal(err)
	}
	if got := pushTime(); got != first {
		t.Fatalf("re-pushed within the interval: %s != %s", got, first)
	}
	if err := p.Sync(ctx, t0.Add(10*time.Second), hungSnapshot()); err != nil {
		t.Fatal(err)
	}
	if got, want := pushTime(), fmt.Sprint(t0.Add(10*time.Second).Unix()); !strings.HasPrefix(strings.ReplaceAll(got, "e+09", ""), "1.70000001") {
		t.Fatalf("push timestamp %s, want %s", got, want)
	}

	// Recovery deletes the group.
	if err := p.Sync(ctx, t0.Add(11*time.Second), healthy); err != nil {
		t.Fatal(err)
	}
	if l := gatewayDrained(t, url, "XPU_TIMER_COMMON_HANG"); len(l) != 0 {
		t.Fatalf("recovered rank still on the gateway: %v", l)
	}
	if len(p.Pushed()) != 0 {
		t.Fatalf("pusher still tracks %v", p.Pushed())
	}

	// A hung rank at job end: Close deletes it.
	if err := p.Sync(ctx, t0.Add(12*time.Second), hungSnapshot()); err != nil {
		t.Fatal(err)
	}
	if l := gatewayLines(t, url, "XPU_TIMER_COMMON_HANG"); len(l) != 1 {
		t.Fatalf("second hang not pushed: %v", l)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if l := gatewayDrained(t, url, "XPU_TIMER_COMMON_HANG"); len(l) != 0 {
		t.Fatalf("group left after Close: %v", l)
	}
}

func TestPusherRetriesAfterFailure(t *testing.T) {
	// Nothing listens on this address: the push fails and is retried.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	p := NewPusher(url, testStatic, time.Minute)
	defer p.Close(context.Background())
	if err := p.Sync(context.Background(), time.Unix(0, 0), hungSnapshot()); err == nil || !strings.Contains(err.Error(), "push rank 1") {
		t.Fatalf("err %v", err)
	}
	if len(p.Pushed()) != 0 {
		t.Fatalf("failed push recorded: %v", p.Pushed())
	}
}
