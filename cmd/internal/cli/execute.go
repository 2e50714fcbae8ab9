package cli

import (
	"errors"
	"strconv"

	"github.com/spf13/cobra"
)

// ExitError carries a specific exit status out of a command (for example the
// launched job's own status, or 128+N when it died of signal N).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return "exit status " + strconv.Itoa(e.Code) }

// ExitCode is the status the process exits with.
func (e *ExitError) ExitCode() int { return e.Code }

// Execute runs cmd and maps its error to a process exit status: the status
// of any error in the chain with an ExitCode method (ExitError, a child's
// *exec.ExitError, and the subcommands' own errors, which cannot import this
// package since it imports them), else 1.
func Execute(cmd *cobra.Command) int {
	err := cmd.Execute()
	if err == nil {
		return 0
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}
