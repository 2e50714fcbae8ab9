// Package timeline owns the timeline directory (XPU_TIMER_TIMELINE_PATH):
// what goes in it under which name, and what leaves it.
//
//	RRRRR-WWWWW.stacktrace      a rank's dump (collector/format/dumpfile), with its
//	RRRRR-WWWWW.txt             readable twin and its flight recorder
//	RRRRR-WWWWW.trace.json      trace (collector/format/trace)
//	hang-<job>.marker           a node's hang announcement to the other nodes
//	incarnations/<job>.<n>/     an earlier incarnation's files, moved aside
//	                            when a newer one dumps the same rank name
//	cpp_stack, py_stack, ...    the viewer's merged view, when it writes into
//	                            the directory (names.go)
//
// DefaultPath is the directory when XPU_TIMER_TIMELINE_PATH is not set.
//
// WriteDump moves an earlier incarnation's files aside before it writes,
// so a dump never mixes with another incarnation's; Retain bounds what the
// earlier incarnations keep; WriteMarker and PollMarker carry markers
// between the agents sharing the directory; List is what a reader (the
// viewer) takes for the current dumps. The formats themselves are
// collector/format/dumpfile's and collector/format/trace's; every file is written
// atomically (internal/atomicfile). The package returns errors and never
// logs: the agent tells.
package timeline
