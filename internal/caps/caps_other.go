//go:build !linux

package caps

import (
	"errors"
	"fmt"
)

// Self fails: capabilities are a Linux thing.
func Self() (Effective, error) {
	return Effective{}, fmt.Errorf("capget: %w", errors.ErrUnsupported)
}
