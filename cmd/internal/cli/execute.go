package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Execute runs cmd and maps its error to a process exit status: the status
// of any error in the chain with an ExitCode method (process.ExitStatus, a
// child's *exec.ExitError), else 1.
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
