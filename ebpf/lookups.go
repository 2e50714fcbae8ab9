package ebpf

// Kernel lookups on demand.
//
// A launch through the CUDA driver names its kernel by an opaque handle:
// a CUkernel, named by the cuLibraryGetKernel (or a CUfunction by the
// cuModuleGetFunction) that returned it, once per kernel; or a CUfunction
// that cuKernelGetFunction made of a CUkernel. cuBLASLt makes that lookup
// before every launch of its kernels (about 6 % of a real training step's
// launches, and the runtime 12 more a step for cudaFuncGetAttributes
// whose results it does not launch), always the same pair: probed all the
// time, it would cost two traps (an entry and a return probe) per lookup
// for nothing new. So its probes are attached only while there is
// something to learn:
//
//   - learning (attached): when a library with the call is first probed,
//     and whenever a launch's handle was never named (a new kernel of
//     cuBLASLt's, whose next lookup names it);
//   - quiet (detached): once no handle is pending and lookupWindow passes
//     with nothing new: no name learned by the lookups, no launch of a
//     handle never named.
//
// A handle nothing named at its first launch is pending (kernelNames)
// until its first launch after the probes came: cuBLASLt's lookup just
// before that launch named it then, or no lookup of it will come (one made
// before the probes were attached, as under `watch --pid`) and it is given
// up on, for good: it keeps its handle as its name and cannot bring the
// probes back. One that launches no more is given up after maxPendingAge. So
// the probes stay as long as one launch of each new handle takes (its
// step), whatever the step's length. The rules, one step per check
// (nextLookup):
//
//	phase     news (a name learned, or a handle never named)   then
//	learning  yes                                               learning, the window starts again
//	learning  no, a handle pending                              learning
//	learning  no, none pending, the window passed               quiet: detach
//	learning  no, none pending, within the window               learning
//	quiet     a handle never named                              learning: attach
//	quiet     otherwise                                         quiet
//
// A name learned while quiet (the lookups' probes were detached, so it
// came from a cuLibraryGetKernel) is no reason to attach them.

// lookupPhase says whether cuKernelGetFunction's probes are attached.
type lookupPhase uint8

const (
	lookupLearning lookupPhase = iota // attached: names are being learned
	lookupQuiet                       // detached: nothing new came for a window
)

func (p lookupPhase) String() string {
	if p == lookupQuiet {
		return "quiet"
	}
	return "learning"
}

// lookupState is where the lookups stand.
type lookupState struct {
	phase lookupPhase
	last  int64 // monotonic ns of the last news while learning
}

// lookupNews is what came since the last check.
type lookupNews struct {
	learned bool // the lookups named a CUfunction never named before
	unnamed bool // a launch of a handle never named: it is pending
	pending int  // handles pending now
}

// nextLookup is the state after a check at now (monotonic ns) that found
// news, with window the quiet time after which learning ends.
func nextLookup(s lookupState, now int64, n lookupNews, window int64) lookupState {
	switch s.phase {
	case lookupLearning:
		if n.learned || n.unnamed {
			return lookupState{lookupLearning, now}
		}
		if n.pending == 0 && now-s.last >= window {
			return lookupState{lookupQuiet, now}
		}
		return s
	default:
		if n.unnamed {
			return lookupState{lookupLearning, now}
		}
		return s
	}
}
