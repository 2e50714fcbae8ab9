package python

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// BenchmarkThreads reads every thread's stack of the test target (10
// threads, 368 frames, one thread 300 deep) per installed interpreter,
// Debian sid's 3.14 and 3.15 included. It reports the first read (Open
// plus Threads with nothing cached: ELF symbols, code objects), the mean
// of later reads, and the median of later walks (Walk alone: what a dump
// holds the threads stopped for), in milliseconds; the target is well
// under 10 ms for all, and a new version about as fast as 3.12 (the
// anchor: compare figures of one run).
func BenchmarkThreads(b *testing.B) {
	privileged.Root(b)
	for _, py := range interpreters {
		b.Run(py.name, func(b *testing.B) {
			if _, err := os.Stat(py.path); err != nil {
				b.Skipf("%s not installed", py.path)
			}
			cmd, _ := startTarget(b, py)
			for i := 0; i < b.N; i++ {
				imageMu.Lock()
				clear(imageCache)
				imageMu.Unlock()
				start := time.Now()
				r, err := Open(cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				ts, err := r.Threads()
				if err != nil {
					b.Fatal(err)
				}
				cold := time.Since(start)
				const warmReads = 50
				start = time.Now()
				for j := 0; j < warmReads; j++ {
					if _, err := r.Threads(); err != nil {
						b.Fatal(err)
					}
				}
				warm := time.Since(start) / warmReads
				// Walk alone, what a dump holds the threads stopped for:
				// the median, against the noise of a shared machine.
				walks := make([]time.Duration, warmReads)
				for j := range walks {
					start = time.Now()
					if _, err := r.Walk(); err != nil {
						b.Fatal(err)
					}
					walks[j] = time.Since(start)
				}
				slices.Sort(walks)
				frames := 0
				for _, t := range ts {
					frames += len(t.Frames)
				}
				b.ReportMetric(float64(cold.Microseconds())/1000, "first-ms")
				b.ReportMetric(float64(warm.Microseconds())/1000, "read-ms")
				b.ReportMetric(float64(walks[warmReads/2].Microseconds())/1000, "walk-ms")
				b.ReportMetric(float64(frames), "frames")
				b.ReportMetric(float64(len(ts)), "threads")
			}
		})
	}
}
