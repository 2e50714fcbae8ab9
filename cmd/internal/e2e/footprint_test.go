package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// footprintRanks is how many ranks the monitor follows in
// BenchmarkMonitorFootprint.
const footprintRanks = 8

// BenchmarkMonitorFootprint measures what xpu_timer_launch costs while it
// follows a healthy 8-rank testbed job: its CPU (user and system, all
// threads) and memory over XPU_TIMER_FOOTPRINT_SECONDS (default 60) after
// a 5 s warm-up, once with the stall watch on (the default: every check
// reads each rank's /proc and Python frames) and once with it off (GPU
// calls only). The anchors are measured on the same run: the job's own
// CPU over the same window, one rank's memory. It fails when the monitor
// followed fewer than 8 ranks, read no probe event, or decided a hang.
func BenchmarkMonitorFootprint(b *testing.B) {
	privileged.Root(b)
	bed := testbed.Build(b)
	window := 60 * time.Second
	if v := os.Getenv("XPU_TIMER_FOOTPRINT_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("XPU_TIMER_FOOTPRINT_SECONDS=%q: want a whole number of seconds", v)
		}
		window = time.Duration(n) * time.Second
	}
	for range b.N {
		on := footprint(b, bed, true, window)
		off := footprint(b, bed, false, window)
		for _, f := range []struct {
			name string
			m    usage
		}{{"stall watch on", on}, {"stall watch off", off}} {
			benchtable.Row(b, fmt.Sprintf("monitor CPU, %d ranks, %s", footprintRanks, f.name),
				fmt.Sprintf("%.2f%% of a core", f.m.monitorCPU),
				fmt.Sprintf("%.1f%% (the job's CPU, same window)", f.m.jobCPU), f.m.monitorCPU/f.m.jobCPU)
			benchtable.Row(b, fmt.Sprintf("monitor RSS, %d ranks, %s", footprintRanks, f.name),
				fmt.Sprintf("%.1f MB (peak %.1f)", f.m.monitorRSS, f.m.monitorPeak),
				fmt.Sprintf("%.1f MB (one rank)", f.m.rankRSS), f.m.monitorRSS/f.m.rankRSS)
		}
		benchtable.Row(b, "stall watch CPU cost", fmt.Sprintf("%.2f%% of a core (on)", on.monitorCPU),
			fmt.Sprintf("%.2f%% of a core (off)", off.monitorCPU), on.monitorCPU/off.monitorCPU)
		b.ReportMetric(on.monitorCPU, "watch-on-cpu-%")
		b.ReportMetric(off.monitorCPU, "watch-off-cpu-%")
		b.ReportMetric(on.jobCPU, "job-cpu-%")
		b.ReportMetric(on.monitorRSS, "watch-on-rss-MB")
		b.ReportMetric(on.rankRSS, "rank-rss-MB")
	}
}

// usage is what one footprint run measured: CPU in percent of one core,
// memory in MB.
type usage struct {
	monitorCPU, jobCPU               float64
	monitorRSS, monitorPeak, rankRSS float64
}

var probeEventsRe = regexp.MustCompile(`(?m)^xpu_timer_probe_events_total\S* (\S+)$`)

// footprint runs one healthy job under the launcher and measures it.
func footprint(b *testing.B, bed *testbed.Bed, watch bool, window time.Duration) usage {
	b.Helper()
	args := append([]string{bins.launch, "--timeline-path", b.TempDir(), "--port", "0", "--stall-watch=" + strconv.FormatBool(watch)},
		bed.JobCommand(testbed.JobOptions{NProc: footprintRanks, Steps: 1 << 30}).Args...)
	p := start(b, args)
	defer p.kill()
	url := p.metricsURL(30 * time.Second)
	rankRe := regexp.MustCompile(`level=INFO msg=rank `)
	p.until(fmt.Sprintf("%d ranks announced", footprintRanks), 60*time.Second, func() bool {
		return len(p.matching(rankRe)) >= footprintRanks
	})
	time.Sleep(5 * time.Second) // warm-up: attaches, first dumps of nothing, caches

	monitor := p.cmd.Process.Pid
	ranks := p.rankPIDs()
	if len(ranks) != footprintRanks {
		b.Fatalf("%d ranks started, want %d", len(ranks), footprintRanks)
	}
	cpu := func() (mon, job time.Duration) {
		mon = cpuTime(b, monitor)
		for _, pid := range ranks {
			job += cpuTime(b, pid)
		}
		return mon, job
	}
	start := time.Now()
	mon0, job0 := cpu()
	var rss, rankRSS []float64
	for time.Since(start) < window {
		time.Sleep(time.Second)
		rss = append(rss, memKB(b, monitor, "VmRSS")/1024)
		for _, pid := range ranks {
			rankRSS = append(rankRSS, memKB(b, pid, "VmRSS")/1024)
		}
	}
	mon1, job1 := cpu()
	elapsed := time.Since(start)
	u := usage{
		monitorCPU:  100 * float64(mon1-mon0) / float64(elapsed),
		jobCPU:      100 * float64(job1-job0) / float64(elapsed),
		monitorRSS:  benchtable.Quantile(rss, 0.5),
		monitorPeak: memKB(b, monitor, "VmHWM") / 1024,
		rankRSS:     benchtable.Quantile(rankRSS, 0.5),
	}

	// It measured a monitor at work: probe events read, no hang decided.
	out, err := scrape(url)
	if err != nil {
		b.Fatal(err)
	}
	if m := probeEventsRe.FindStringSubmatch(out); m == nil || m[1] == "0" {
		b.Fatalf("the monitor read no probe event:\n%s", out)
	}
	if watched := regexp.MustCompile(`(?m)^xpu_timer_rank_detectors\{.*detector="stacks".*\} 1$`).FindAllString(out, -1); watch && len(watched) != footprintRanks {
		b.Fatalf("the stall watch is on, yet %d ranks are watched by stacks, want %d:\n%s", len(watched), footprintRanks, out)
	}
	if hangs := p.matching(regexp.MustCompile(`msg=hang `)); len(hangs) > 0 {
		b.Fatalf("a healthy job was decided hung: %s", hangs[0].Text)
	}
	if u.jobCPU == 0 {
		b.Fatal("the job used no CPU: measured nothing")
	}
	return u
}

// cpuTime is the user and system time of process pid, all its threads
// (/proc/PID/stat fields 14 and 15, in USER_HZ ticks, 100 a second on
// Linux).
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("process %d is gone: %v", pid, err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3
	var ticks int64
	for _, i := range []int{14, 15} {
		n, err := strconv.ParseInt(f[i-3], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat field %d: %v", pid, i, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// memKB is the field name (VmRSS, VmHWM) of /proc/PID/status in kB.
func memKB(b *testing.B, pid int, name string) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatalf("process %d is gone: %v", pid, err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			f := strings.Fields(v)
			if n, err := strconv.ParseFloat(f[0], 64); err == nil {
				return n
			}
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, name)
	return 0
}
