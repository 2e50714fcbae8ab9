//go:build linux && amd64

package gpuwait

import (
	"slices"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// BenchmarkSample: one sample of a process whose main thread spins in the
// driver's synchronize (and three other threads), against a full dump of
// the same process with the same unwinder (native and Python stacks, the
// whole stacks, with lines as the agent dumps them): the median of 15 of each, after one of each warmed the
// symbol cache, and the longest stop of the samples against 10 ms.
func BenchmarkSample(b *testing.B) {
	privileged.Root(b)
	pid := startSpinwait(b, "threads")
	time.Sleep(50 * time.Millisecond)
	u := native.NewUnwinder(nil)
	s := &Sampler{Unwinder: u}
	for i := 0; i < b.N; i++ {
		if _, err := s.Take(pid); err != nil {
			b.Fatal(err)
		}
		if _, err := dump.Capture(pid, dump.Options{Unwinder: u, Lines: true}); err != nil {
			b.Fatal(err)
		}
		var samples, dumps, stops []time.Duration
		seen := 0
		for j := 0; j < 15; j++ {
			time.Sleep(100 * time.Millisecond)
			t0 := time.Now()
			r, err := s.Take(pid)
			if err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(t0))
			stops = append(stops, r.StoppedFor)
			if len(r.Waits) > 0 && r.Waits[0].TID == pid || len(r.Waits) > 1 {
				seen++
			}
			time.Sleep(100 * time.Millisecond)
			t0 = time.Now()
			if _, err := dump.Capture(pid, dump.Options{Unwinder: u, Lines: true}); err != nil {
				b.Fatal(err)
			}
			dumps = append(dumps, time.Since(t0))
		}
		if seen == 0 {
			b.Fatal("no sample saw the spinning thread")
		}
		slices.Sort(samples)
		slices.Sort(dumps)
		slices.Sort(stops)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(samples[len(samples)/2]), "sample-ms")
		b.ReportMetric(ms(dumps[len(dumps)/2]), "dump-ms")
		b.ReportMetric(ms(stops[len(stops)-1]), "max-stop-ms")
		b.ReportMetric(float64(seen)/15, "seen-share")
	}
}
