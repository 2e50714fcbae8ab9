// Package e2e holds the end-to-end tests of xpu-timer, and nothing else:
// the built commands (xpu_timer_launch, xpu-timer watch,
// xpu_timer_stacktrace_viewer) run with real eBPF probes and real ptrace
// stack capture against fake training jobs of the GPU testbed
// (testdata/fakegpu), one per fault kind, and the results are checked the
// way users and their tools read them: the dump files, the viewer's
// summary, /metrics as Prometheus, its alert rules, a Pushgateway and
// DLRover see it, and watch's JSON lines.
//
// The tests need root (privileged.Root): they skip without it, and fail
// instead under XPU_TIMER_REQUIRE_PRIVILEGED=1.
package e2e
