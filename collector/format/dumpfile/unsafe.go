package dumpfile

import "unsafe"

// unsafeString views b as a string without copying; the caller must not
// keep it past b's next change.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
