package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// TestHealthyJob runs a healthy 4-rank, 30-step job under xpu_timer_launch
// with a timeout shorter than the job (a false alarm would show), scraping
// /metrics throughout: it exits 0, dumps nothing, and every scrape says no
// rank is hung, to us and to DLRover.
func TestHealthyJob(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	dir := filepath.Join(t.TempDir(), "timeline")
	const hangTimeout = time.Second
	p := launch(t, b, job{extra: []string{"--step-ms", "60"}}, dir, hangTimeout)
	url := p.metricsURL(30 * time.Second)
	begin := time.Now()

	scrapes, full := 0, 0
	for !p.exited() {
		body, err := scrape(url)
		if err != nil {
			continue // the job ended meanwhile
		}
		scrapes++
		compat := byRank(parseText(body), "XPU_TIMER_COMMON_HANG")
		for r, v := range compat {
			if v != 0 {
				t.Errorf("XPU_TIMER_COMMON_HANG{rank=%q} = %v in a healthy job", r, v)
			}
		}
		if dlroverHung(body) {
			t.Errorf("DLRover's rule reads the healthy job as hung:\n%s", grep(body, "XPU_TIMER_COMMON_HANG"))
		}
		if len(compat) == nproc {
			full++
		}
		time.Sleep(150 * time.Millisecond)
	}
	code := p.waitExit(30 * time.Second)
	took := time.Since(begin)
	if code != 0 {
		t.Fatalf("healthy job exited %d\n%s", code, p.output())
	}
	if full == 0 {
		t.Errorf("none of %d scrapes showed all %d ranks", scrapes, nproc)
	}
	if took < 2*hangTimeout {
		t.Errorf("the job took %v, too short to tell a false alarm from none at a %v timeout", took, hangTimeout)
	}
	for r := range nproc {
		if s := p.stepDone(29)[r]; s.IsZero() {
			t.Errorf("rank %d did not finish step 29", r)
		}
	}
	if hs := p.matching(regexp.MustCompile(`msg=hang `)); len(hs) > 0 {
		t.Errorf("hang decided in a healthy job: %s", hs[0].Text)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		t.Errorf("the healthy job left %d files in the timeline path, first %s", len(ents), ents[0].Name())
	}
	p.checkClean()
	t.Logf("healthy job: %v under a %v timeout, %d scrapes (%d with all ranks), status %s",
		took.Round(time.Millisecond), hangTimeout, scrapes, full, strconv.Itoa(code))
}
