//go:build !(linux && cgo)

// Package leandump makes `xpu-timer dump` run as xpu-timer-dump where
// xpu-timer links cgo on Linux (see leandump.go); elsewhere xpu-timer
// dumps in its own process.
package leandump
