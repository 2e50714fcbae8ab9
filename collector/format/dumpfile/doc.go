// Package dumpfile is the on-disk format of a rank's hang dump,
// RRRRR-WWWWW.stacktrace in XPU_TIMER_TIMELINE_PATH: versioned JSON, written
// atomically, read back by the viewer (docs/stacktrace-schema.md has the
// same description for people who never read Go).
//
// # Files
//
// Name(rank, world) is "%05d-%05d.stacktrace": rank and world size, five
// digits, zero padded ("00003-00008.stacktrace"), as xpu_timer names them;
// the viewer takes the job's world size from these names. Write puts the
// readable rendering (Text) beside it as RRRRR-WWWWW.txt. Both are written
// to a temporary file in the same directory, synced, and renamed into
// place, so a reader sees the old file or the new one, never a part.
//
// # Encoding
//
// One JSON object (UTF-8, compact, HTML characters not escaped, a final
// newline) with these members; times are RFC 3339, durations and monotonic
// times integer nanoseconds; members marked "omitted when empty" may be
// absent:
//
//	schema            "xpu-timer.stacktrace/1.1" (required; see versioning)
//	rank, world_size  the rank and the job's world size (world_size > 0, 0 <= rank < world_size)
//	local_rank, local_world_size, host, pid
//	ip, job_name, pod_name, cmdline           omitted when empty
//	job, incarnation  the run (TORCHELASTIC_RUN_ID where set) and its restart count (TORCHELASTIC_RESTART_COUNT,
//	                  else SLURM_RESTART_COUNT, else the launcher's count); omitted when empty or 0, and absent from files before 1.1
//	state             process state as /proc/PID/stat spells it, with its meaning: "S (sleeping)", "D (disk sleep)"
//	python            the CPython version ("3.12.3") of a CPython process; omitted otherwise
//	reason            "hang" (this rank hung), "peer" (another rank on the node hung), "marker" (another node hung), "manual" (xpu-timer dump)
//	dumped_at, dump_duration_ns, stopped_for_ns
//	hang              Hang (decision.go, the engine's decision as package timer spells it): this rank's own decision (kind "gpu" or "host", oldest op, waiters, comms); omitted when it did not hang
//	comms             []CommState: per communicator id, rank, nranks, issued and completed sequence numbers, last_op
//	threads           []stack.Thread (below)
//	errors            []string: what could not be captured, and why (a library on the stacks whose headers lie:
//	                  what was left out and where its names came from, "path: ...; names from .symtab")
//	gpu               NVML's view of the device, with Xid events
//
// A thread is {tid, name, state, gil, native, python, merged, error}; each
// of native, python and merged is a list of frames, innermost first (as gdb
// and py-spy print them): {func, file, line, module, addr, entry}. Native
// frames carry addr and module (the mapped object's path); Python frames
// carry file and line and have module "python", and their func is the bare
// name (co_name) on every CPython version (1.0 files from 3.11+ hold
// co_qualname); merged is the native stack
// with each interpreter frame replaced by the Python frames it ran. An
// unknown function is "??". A process in state D is not attached: its file
// has a state and no threads.
//
// # Versioning
//
// Readers accept every "xpu-timer.stacktrace/1.x" and ignore members they do
// not know, so 1.x writers may add members. A change that alters the
// meaning of an existing member is a new major version, which readers of
// 1.x reject as foreign.
//
// # Reading
//
// Read and Parse validate as they decode. Their errors name the file and
// wrap ErrEmpty (nothing but white space), ErrTruncated (the JSON ends
// early: a copy cut short), ErrForeign (valid JSON that is not ours: no or
// another schema) or ErrCorrupt (anything else, including a rank outside the
// world size).
//
// # Markers
//
// Beside the dumps, an agent whose node has a hung rank writes
// hang-<job>.marker (MarkerName), a small JSON object with schema
// "xpu-timer.marker/1" (Marker): agents of the same job on other nodes that
// share the directory dump their own ranks once, with reason "marker".
// ParseMarker rejects anything else with ErrBadMarker.
package dumpfile
