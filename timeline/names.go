package timeline

// DefaultPath is the timeline directory when XPU_TIMER_TIMELINE_PATH is not
// set (xpu_timer's default): where dumps, traces and markers go.
const DefaultPath = "/root/timeline"

// The merged view's files (the viewer writes them into its output
// directory, by default the timeline directory itself), as xpu_timer names
// them (mixed_stack, stacks.pb.gz and summary.txt are ours). They are no
// dump's names, so List and Retain never take them for one.
const (
	CppFolded   = "cpp_stack"       // folded native stacks (flamegraph.pl / inferno input)
	PyFolded    = "py_stack"        // folded Python stacks
	MixedFolded = "mixed_stack"     // folded merged stacks
	CppSVG      = "cpp_stack.svg"   // their flame graphs
	PySVG       = "py_stack.svg"    //
	MixedSVG    = "mixed_stack.svg" //
	Profile     = "stacks.pb.gz"    // pprof profile, rank sets as labels
	Summary     = "summary.txt"     // the culprit report
)
