package culprit

import (
	"fmt"
	"strconv"
)

// Kind is what a finding observed. Kinds before KindBackground are in the
// order the culprit is taken from (kindOrder); String and MarshalText spell
// each as the report prints it.
type Kind uint8

// Kinds of findings, in the order the culprit is taken from.
const (
	KindBehind     Kind = iota // issued fewer collectives than the others on a communicator
	KindKernel                 // hung in a kernel while others wait in a collective
	KindHost                   // no GPU call while peers wait
	KindDState                 // uninterruptible sleep
	KindPython                 // the driving thread's Python stack differs from the majority's
	KindStack                  // an application thread in the collective library differs from the majority's
	KindOdd                    // another application thread with Python frames differs, or only a few ranks have it
	KindNative                 // an application thread without Python frames (a stream executor) differs
	KindMissing                // no dump
	KindBackground             // a library's helper thread differs: never a culprit by itself
)

var kindNames = [...]string{
	KindBehind: "behind", KindKernel: "kernel", KindHost: "host", KindDState: "dstate", KindPython: "python",
	KindStack: "stack", KindOdd: "odd", KindNative: "native", KindMissing: "missing", KindBackground: "background",
}

// String is the kind as the report prints it ("behind", "kernel", ...).
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText spells the kind as String does, so JSON carries the text.
func (k Kind) MarshalText() ([]byte, error) {
	if int(k) >= len(kindNames) {
		return nil, fmt.Errorf("culprit: unknown finding kind %d", k)
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText reads a kind as String spells it.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("culprit: unknown finding kind %q", b)
}

// kindOrder ranks the kinds: a rank behind on a communicator is the surest
// sign; then what the engine decided (a kernel, a silent host, state D);
// then the Python stack of the thread that drives training, then native
// stacks of application threads; a stack that differs from a clear
// majority comes before ranks with no dump, which may be missing for
// mundane reasons (node lost, unreadable). Background threads are not in
// it: caught at different points of their loops, they are noise.
var kindOrder = []Kind{KindBehind, KindKernel, KindHost, KindDState, KindPython, KindStack, KindOdd, KindNative, KindMissing}
