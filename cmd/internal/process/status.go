package process

import (
	"fmt"
)

// ExitStatus is an error that carries a process exit status out of a
// command: cli.Execute exits with ExitCode of the first error in the chain
// that has one.
type ExitStatus int

func (e ExitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// ExitCode is the status to exit with.
func (e ExitStatus) ExitCode() int { return int(e) }

// Exit returns err carrying the exit status code: its message is err's,
// and errors.As finds both err's chain and the ExitStatus.
func Exit(code int, err error) error { return &exit{status: ExitStatus(code), err: err} }

type exit struct {
	status ExitStatus
	err    error
}

func (e *exit) Error() string   { return e.err.Error() }
func (e *exit) ExitCode() int   { return int(e.status) }
func (e *exit) Unwrap() []error { return []error{e.err, e.status} }
