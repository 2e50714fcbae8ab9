//go:build !linux

package hugeheap

// Reserve does nothing off Linux.
func Reserve(n int) bool { return false }
