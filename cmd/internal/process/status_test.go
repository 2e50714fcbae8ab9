package process

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestExit(t *testing.T) {
	err := fmt.Errorf("dump: %w", Exit(4, fmt.Errorf("not permitted: %w", fs.ErrPermission)))
	var st ExitStatus
	if !errors.As(err, &st) || st != 4 {
		t.Errorf("exit status %v in %v, want 4", st, err)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("%v lost its cause", err)
	}
	if err.Error() != "dump: not permitted: permission denied" {
		t.Errorf("message %q", err)
	}
	var ec interface{ ExitCode() int }
	if !errors.As(err, &ec) || ec.ExitCode() != 4 {
		t.Errorf("no ExitCode 4 in the chain of %v", err)
	}
	if got := ExitStatus(3).Error(); got != "exit status 3" {
		t.Errorf("ExitStatus(3) reads %q", got)
	}
}
