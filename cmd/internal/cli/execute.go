package cli

import (
	"errors"
	"os/exec"
	"strconv"

	"github.com/spf13/cobra"
)

// ExitError carries a specific exit status out of a command (for example the
// launched job's own status, or 128+N when it died of signal N).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return "exit status " + strconv.Itoa(e.Code) }

// Execute runs cmd and maps its error to a process exit status.
func Execute(cmd *cobra.Command) int {
	err := cmd.Execute()
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		return xe.ExitCode()
	}
	return 1
}
