//go:build !linux

package symbols

// populated returns a zeroed buffer of n bytes.
func populated(n int) []byte { return make([]byte, n) }
