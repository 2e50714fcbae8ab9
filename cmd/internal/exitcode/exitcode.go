// Package exitcode is the one table of exit statuses every xpu-timer binary
// uses (docs/usage.md, "Exit statuses"): the same number means the same thing in
// xpu_timer_launch, xpu_timer_stacktrace_viewer and every xpu-timer
// subcommand. Commands return an error carrying the status (Status, or
// Usage for a bad command line); Execute exits with it.
package exitcode

import (
	"errors"
	"fmt"
)

// The statuses. A command that runs a job (xpu_timer_launch, watch -- CMD)
// passes the job's own status through, 128+N when signal N killed it; every
// other status is xpu-timer's own.
const (
	OK           = 0   // success
	Failure      = 1   // the command failed (an error is printed)
	Usage        = 2   // bad flag, argument or setting: nothing was done
	Hang         = 3   // a hang was found (watch --exit-on-hang)
	NotPermitted = 4   // missing privileges: eBPF (CAP_BPF, CAP_PERFMON) or ptrace (CAP_SYS_PTRACE)
	NoProcess    = 5   // the target process does not exist or exited meanwhile
	CannotRun    = 126 // the job's command was found but could not be started
	NotFound     = 127 // the job's command was not found
)

// Status is an error that carries only an exit status: whatever there was to
// say has been said.
type Status int

func (s Status) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// ExitCode is the status to exit with.
func (s Status) ExitCode() int { return int(s) }

// Error is an error with a message to print and a status to exit with.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the status to exit with.
func (e *Error) ExitCode() int { return e.Code }

// With returns err with exit status code; nil stays nil.
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Usagef is a usage error: exit status 2.
func Usagef(format string, args ...any) error {
	return &Error{Code: Usage, Err: fmt.Errorf(format, args...)}
}

// Of returns the exit status for err: 0 for nil, the status of the first
// error in its chain with an ExitCode method (a Status, an Error, a child's
// *exec.ExitError), else Failure.
func Of(err error) int {
	if err == nil {
		return OK
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return Failure
}
