// Package gpu reads GPU facts and Xid error events through NVML (go-nvml).
//
// NVML is optional: without its library or without a driver, Open returns an
// error matching ErrUnavailable, which the caller reports as a one-line
// notice; everything else in xpu-timer works without it.
package gpu

import (
	"errors"
	"time"
)

// ErrUnavailable means NVML cannot be used here: no library or no driver.
var ErrUnavailable = errors.New("nvml unavailable")

// ErrNoXidEvents means no device supports Xid event notification.
var ErrNoXidEvents = errors.New("no device supports xid events")

// DefaultXidWindow is how long an Xid event is reported after it happened.
const DefaultXidWindow = 15 * time.Minute
