// Package monoclock reads CLOCK_MONOTONIC, the clock of the probes'
// bpf_ktime_get_ns: the one time base that orders probe events, stack
// samples and checks against each other.
package monoclock

import "golang.org/x/sys/unix"

// Now is CLOCK_MONOTONIC in nanoseconds (0 if the clock cannot be read,
// which Linux never refuses).
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
