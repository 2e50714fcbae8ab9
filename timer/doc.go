// Package timer is the hang and timing engine: decoded GPU API events go in,
// hang decisions and timing statistics come out. It knows nothing of eBPF,
// files or clocks; the caller passes the time with every call (Event.Time,
// and the now of Check, Recovered and State, all monotonic nanoseconds).
//
// # Outstanding work
//
// Per process and per stream the engine keeps a queue of outstanding ops:
// kernel launches (runtime, driver API), graph launches, async copies,
// collectives and synchronous copies. Every op has its issue time, a
// position in its stream, and, for a collective, its communicator and a
// 1-based sequence number on that communicator (counted per collective;
// ncclGroupStart/End grouping does not change the count). The
// communicator of a handle comes from KindCommInit (hex of the first 16
// bytes of the ncclUniqueId, the same on every rank); a handle whose
// initialisation was not seen is "local:<hex handle>". Collective bytes
// are Count × DtypeSize (per-rank buffer bytes). A stream keeps at most
// Config.MaxOpsPerStream ops: beyond, the oldest is forgotten and counted
// in ProcState.Dropped. KindProcessExit forgets a process.
//
// # Completion rules
//
// Only successful calls (return 0) retire work; a failed call retires
// nothing.
//   - cudaEventRecord(ev, s) remembers s's current position for ev.
//   - cudaEventQuery(ev) returning 0, or cudaEventSynchronize(ev) returning
//     0, retires ev's stream up to ev's position.
//   - cudaStreamSynchronize(s) retires s up to its position at the call's
//     entry; cudaStreamQuery(s) returning 0 retires all of s.
//   - cudaDeviceSynchronize retires every stream up to its position at the
//     call's entry.
//   - A synchronous cudaMemcpy is an op of the legacy default stream 0
//     issued at entry; its successful return retires stream 0 up to and
//     including the copy. Only stream 0 is retired, because streams
//     created non-blocking (as PyTorch's are) do not synchronise with it;
//     but the copying thread counts as a device-wide waiter (like
//     cudaDeviceSynchronize), since with blocking streams it waits for
//     them all: a hang is then blamed on the oldest outstanding op of the
//     process.
//   - cudaStreamWaitEvent(s, ev) makes later items of s depend on ev's
//     position in its stream. When s is retired past that wait, the
//     dependency is retired too (it must have completed first), and a
//     waiter on s waits, through it, for the other stream's work.
//
// # Waiters and the hang rule
//
// CUDA documents that any call may block: a launch when its stream's
// queue is full (about 1,000 pending launches behind an unfinished
// kernel) or under CUDA_LAUNCH_BLOCKING=1, an allocation or a free (they
// synchronize the device), a context's destruction, NCCL's. So the fact
// of waiting decides, not a list of waits: a thread waits on the GPU when
// it is inside any call into the GPU libraries while its process has GPU
// work not known complete. Each thread has one call state (its latest
// call as the probes saw it), which every call it makes replaces:
//   - inside: it entered a call whose return is probed and has not
//     returned (Enter seen, no Exit yet): a synchronize, a synchronous
//     copy, or a call made now and then (KindCall: an allocation, a
//     free, a memset, host registration, a destroy or unload, a module
//     load, NCCL's finalize). It waits from the entry;
//   - entered: it entered a call whose return is not probed (the calls
//     of every step, probed at entry only: launches, graph launches,
//     asynchronous copies, event records, stream waits, collectives,
//     ncclGroupEnd, a communicator's destruction) and has made no call
//     since: it is inside it or returned unseen. A native sample taken
//     more than the timeout after the entry that finds the thread inside
//     a GPU call (see "Waits known by their stack") says it has been in
//     that call since (the probes saw it make no other): it waits from
//     the entry. A sample that finds it outside every GPU call says it
//     returned. Only a caller that takes such samples (Config.Samples,
//     sampling at EnteredSince plus the timeout) gets these waits;
//   - outside: it returned (a query, an exit, a communicator's creation
//     seen at its return), or a sample saw it outside every GPU call.
//
// A thread also waits when it polled the same event and got
// cudaErrorNotReady (600) Config.PollRepeat times (not necessarily back
// to back, so a watchdog polling several events in turn counts) since
// that event was recorded: it is a polling waiter from its first
// not-ready poll until the event reports ready or is recorded again.
//
// What a waiter waits for: a stream synchronize, and a call of one stream
// (a launch, a copy, a collective: its own op included, which under
// CUDA_LAUNCH_BLOCKING is the one it waits for; behind a full queue it
// waits for the oldest), every item of its stream up to its position; an
// event synchronize or a poll, the event's stream up to its record; a
// device synchronize, a synchronous copy, a KindCall without a stream and
// a group end, every stream up to its position at the entry (the whole
// device); and, through stream-wait dependencies, the ops those wait for.
// The oldest of them not known complete is what it is stuck on. The probes see no completion that no
// thread waited for, so work before the stuck op may have completed
// unobserved: a decision also says how many awaited ops are not known
// complete (Hang.Awaited) and names the newest of them (Hang.Newest), and
// the stuck op is one of those, from the oldest to the newest.
//
// A process is hung on the GPU ("gpu") when a waiter has been waiting
// longer than Config.HangTimeout and the work it waits for still has an
// op not known complete (which has then been outstanding at least as
// long). The wait itself must last past the timeout: a process that was
// busy on the CPU for long and then synchronises quickly raises nothing,
// and neither does one whose GPU work is all complete while it computes,
// sleeps, writes a checkpoint or compiles a module in the driver, however
// old its last launch, nor a loop whose launches each wait less than the
// timeout (for a slot, or for their kernel under CUDA_LAUNCH_BLOCKING).
// The decision names the call the thread is in (Waiter.Call: the probed
// function, in the driver's spelling for launches, copies and events:
// "cuLaunchKernel", "cuMemFree_v2", "ncclAllReduce"), the oldest op not
// known complete among what it waits for, and the newest (Hang.Newest).
//
// A process is stalled on the host ("host") when it has issued no GPU work
// (launch, copy, collective) for longer than the timeout while a peer in
// the engine is stuck (a waiter past the timeout on outstanding work) and
// that work includes a collective of a communicator this process also
// belongs to at a sequence number this process has not issued:
// Hang.Lagging names the communicator, this process's last sequence
// number and the highest one the peer awaits, and (Lag.Op) the collective
// the peer is stuck in when it is that awaited one, decided in the same
// check or before. Polling and synchronising
// are not new work, so a rank whose watchdog keeps querying completed
// events every 100 ms is still stalled. With Config.Samples, a process
// with a thread entered in a call whose return is not probed, awaiting
// GPU work not known complete, is not stalled on the host until a sample
// tells whether it is inside it (then it is a "gpu" wait) or not. A peer stuck only on
// communicators this process has already reached does not count. When no
// communicator links the two (the peer awaits no collective on a
// communicator this process knows, and one of them knows no communicator
// by its unique id), there are no sequence numbers to compare, and the
// silence alone is no evidence: the process may wait on its peer where
// the probes do not see (a gloo collective, a store key, a lock). It is
// then stalled on the host only on other evidence: the peer is stuck in a
// collective while this process has no collective in flight (it never
// joined one), or looks (see "Silent ranks") saw its main thread spinning
// in the same Python frames for longer than the timeout (Hang.Stall,
// Spinning). A silent process whose peer is stuck on a kernel or a copy
// and that sleeps is left to the "stalled" rule, and the peer's "gpu"
// decision names the work it is stuck on. The engine sees no store keys
// and no gloo or socket traffic: a barrier or key a rank never reached,
// or a recv a peer waits in, counts only through the stacks (the viewer's
// report). A process that never issued GPU work nor created a
// communicator (a launcher, a data loader worker) is never stalled.
//
// # Silent ranks
//
// Probes see nothing of a rank stuck before its first GPU call, in a
// rendezvous store, a gloo collective, a Python lock, or one whose job hung
// before tracing began. For those the caller looks, about once a check,
// at the main thread of every rank from outside (Observe with a Look: its
// scheduler state and counters, where it waits, its Python frames) and the
// engine keeps, per process, since when the main thread has made no
// progress:
//   - asleep ('S', 'D' or 'T') and not gone to sleep again since the
//     previous look (Look.Sleeps, its voluntary context switches; or only
//     as the native samples, see "Waits known by their stack", and the
//     captures the caller tells of (Stopped) made it meanwhile: each stops
//     and resumes every thread, putting a sleeping one to sleep twice,
//     however often it is preempted on the way; a thread that slept more
//     often woke on its own), waiting at the same place: no progress
//     since it went to sleep (Look.LastRan when known, else the first
//     look that saw it asleep);
//   - asleep at both looks in a sleep for time alone (Look.Timed:
//     nanosleep, or select or poll given no descriptor, what Python's
//     time.sleep calls) at the same place, though it woke in between, no
//     more often than a loop of that sleep alone can (its length is at
//     least how long each look saw it last so far, Look.LastRan): a loop
//     that only sleeps (a straggler's `while True: time.sleep(1)`) makes
//     no progress either, from the first of those looks (or when it last
//     ran before it); a thread that went to sleep more often worked
//     between its sleeps (a rank resting after each step);
//   - running, in the same Python frames as at the previous look, for at
//     least half the time between the two looks: spinning, no progress
//     since the first of those looks;
//   - anything else is progress.
//
// GPU work issued later than that moves the start forward.
//
// A process is "stalled" when its main thread has not progressed for
// longer than the timeout, no thread of it nor of an undecided peer waits
// on GPU work (the "gpu" and "host" rules judge those, with sequence
// numbers), and every other looked-at process is decided already or has
// not progressed for longer than the timeout either (the ranks of a hung
// job are decided together, when the last of them crosses the timeout).
// A rank that finished and waits while its peers still train is not
// stalled, nor one whose peers wait a moment in a collective, nor one in a
// wait shorter than the timeout, nor a lone process (no other looked-at
// rank: nothing waits for it). A spinning process is decided
// "host" (Hang.Stall.Spinning), and only while some peer is stuck rather
// than spinning: ranks that all compute in one Python function for long
// are busy, not hung. Either clears when the main thread progresses.
//
// A process with a thread in a GPU wait by its latest sample (see "Waits
// known by their stack") is not stalled, nor stalled on the host, and
// neither is a peer of such a process stalled until that wait is decided:
// the "gpu" rule judges it first. A wait whose thread the probes saw
// make a call (but a query answered "not ready") since the sample that
// first saw it has ended: a rank is sampled only after a sample period
// without GPU work, so its latest sample may date from before it trained.
// Nor does a wait first seen before the rank's last GPU work hold off the
// host rule: it says nothing of the silence since that work.
//
// # Waits known by their stack
//
// On a real GPU a thread waiting on it spins inside the driver (state R,
// its counters rising), so looks see it busy, and a job hung before
// tracing began shows the probes no call entry. Its native stack still
// says where it waits. For those the caller samples, at most once a
// sample period per process, the native stacks of every thread of a rank
// and passes the threads inside a GPU call (frames of the GPU libraries
// on top of the stack, below the caller's: a synchronize, a copy, a
// launch, a free, NCCL's calls; or a framework's work wait, a c10d
// WorkNCCL::wait) to ObserveSample, each with its call, the routine it
// waits for, and its Python frames. The same samples tell the calls
// whose return is not probed (see "Waiters and the hang rule"): the
// caller takes one just past EnteredSince plus the timeout. A thread the
// probes saw enter a call made now and then (KindCall) it has not
// returned from, in a process they saw from its start (so all its GPU
// work), is left to the probe rule, which knows what it waits for: a
// module compiled in the driver with nothing outstanding is no wait
// however long. (A synchronize or a copy waits on GPU work by what it is:
// one that lasts waits on work the probes missed, which its stack shows.)
// One thread is in the same wait across samples when they
// name the same routine (else the same call) and the same Python frames,
// and the probes saw the thread make no call in between but queries
// answered "not ready" (the polls of a wait): a call entered or returned,
// a launch, a collective or a ready answer ends the wait (a loop of long
// synchronizes at one place is many waits, even when the probes came in
// the middle of one). A sample is stamped when its stacks were read. A
// thread missing from a sample is not waiting.
//
// A process is hung on the GPU ("gpu", Hang.StackWait) when a sample saw
// a thread in the same wait as a sample more than the timeout earlier,
// and no other rank progresses: each is decided already, waits on the GPU
// (probes or stacks), or its main thread has not progressed for longer
// than the timeout by looks (a rank waiting on the GPU while its peers
// compute may be waiting for them). A lone rank (world size 1, or the only
// process looked at) is decided alone: its wait is evidence enough. The
// decision names the wait (Waiters holds "cuStreamSynchronize from
// c10d::AsyncAllreduceCUDAHostWork::run (seen on its stack)"), and the
// oldest outstanding op and collective when the probes saw them. It is
// made at the first sample past the timeout, so the caller should take
// one just then (StackWaitSince); it clears when a sample no longer sees
// that thread in that wait, or the probes see it make a call. The probe rule,
// which knows the awaited op, goes first.
//
// Check fires a decision once per process; Recovered reports a process
// whose condition cleared (its waiters' work completed or the waits ended,
// or for "host" it issued work again or the peers stopped waiting), after
// which it may fire again. A process that exits or execs is reported
// recovered if it was hung. A decision is complete: it carries what its
// report, dump and marker need (the op, the streams' pending work, the
// communicators' states, the waiters, the peer's op for "host"), so the
// caller keeps the decisions Check returned until Recovered clears them
// and never asks the engine again.
//
// # Lagging ranks
//
// The hang rules wait for the timeout; the lag rule warns before it,
// and decides nothing. A thread of a process waits in a collective of a
// communicator when it is a waiter (see "Waiters and the hang rule") and
// the work it awaits holds a collective of that communicator not known
// complete: it waits in the lowest such sequence number, N, since the
// waiter began (Progress: CommProgress.Waiting, WaitSince, once the
// waiter has waited ProgressWait). A process q
// lags on a communicator (Laggards) when a peer p has waited in its
// collective N for at least the warning's wait, and q, which belongs to
// that communicator (by its unique id), has issued only collectives
// below N: it has not issued the one p waits in. Laggard.Seq is the
// lowest such N, Since the earliest start of those waits, Peers how
// many processes wait so.
//   - A communicator known only by its handle ("local:") links nobody.
//   - Ranks that all issued N and wait in it (a dead network, a kernel
//     that never ends) lag on nothing: no rank is behind.
//   - A rank that waits in a collective below N, whose completion it has
//     not seen, has still not issued N: it lags.
//   - Ranks that wait a moment in each collective for a slower peer (a
//     healthy job with uneven steps) lag on nothing while each wait is
//     shorter than the warning's.
//   - A peer whose own completions the probes did not see waits, for the
//     rule, in the oldest collective not known complete: it may then
//     name too low an N and miss a laggard, never name a rank that
//     issued the collective it waits in.
//
// The rule compares processes of one engine (one node). Across nodes
// the same comparison is made on the metrics (issued and completed
// sequence numbers, the wait), by the alert rules in deploy/prometheus.
// A process waits (Awaiting) when a thread of it waits on GPU work not
// known complete: its longest wait, with the oldest op and the oldest
// collective of that work, tells what a lagging rank waits on.
//
// # Timing
//
// The observed duration of an op runs from the later of its issue and the
// previous observed completion on its stream to the time its completion
// was observed; ops retired together share the earlier bound. It is an
// upper bound of the GPU time when the completion is observed promptly (a
// thread was waiting for it), and inflated by how late the host looked.
// Where the application itself calls cudaEventElapsedTime(start, end) and
// exactly one op lies between the two records on one stream, the measured
// time is that op's exact duration; any other measured span goes to
// Stats.Spans. Statistics are per process, per kernel name (graph
// launches and copies are not included) and per collective key (op,
// dtype, size class = bytes rounded up to a power of two, ranks); each
// keeps count, sum, min, max and quantiles from a bounded log-linear
// histogram, and at most 1024 keys per kind per process (the rest merge
// into "[other]"). Collective bandwidths follow nccl-tests (AlgBytes,
// BusBytes) in Gbit/s.
//
// # Known limits
//
// Stream handle 1 (cudaStreamLegacy) is the legacy default stream 0. The
// per-thread default stream (handle 2) is treated as one stream of the
// process. A call whose return is not probed is known as a wait only
// with native samples (the stall watch): without them, a launch that
// never returns is not decided. A sample that finds the thread inside a
// GPU call more than the timeout after the entry takes it for that call:
// a thread that returned, worked on the CPU past the timeout making no
// probed call and is caught inside an unprobed one (cudaGetDevice) is
// taken for blocked in it. A call entered before tracing began, in a
// process followed while it ran, is judged by its stack alone,
// outstanding work or not: a module compiled in the driver for longer
// than the timeout is then taken for a GPU wait. The oldest op of a "gpu"
// decision is the oldest not known complete: when the application never
// observed the completion of earlier work on that stream, it may be older
// than the op really stuck;
// Hang.Collective then names the oldest awaited collective, and Hang.Comms
// the per-communicator issued and completed sequence numbers. A stream or
// device synchronize whose entry was not seen (tracing began inside it)
// retires nothing at its return; an event synchronize retires up to the
// event's latest record.
package timer
