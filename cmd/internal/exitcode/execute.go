package exitcode

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/internal/cpuprofile"
	"github.com/xpu-timer/xpu-timer/internal/version"
)

// Execute runs cmd, prints its error and returns the exit status of the one
// table in package exitcode: a bad flag, argument or missing required flag
// is a usage error (2) in every command; other errors carry their own
// status (Of), else 1. Every binary answers --version. With
// XPU_TIMER_CPU_PROFILE set, the run writes a Go CPU profile there
// (package cpuprofile).
func Execute(cmd *cobra.Command) int {
	if cmd.Version == "" {
		cmd.Version = version.String()
		cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	}
	prepare(cmd)
	defer cpuprofile.Start()()
	c, err := cmd.ExecuteC()
	if err == nil {
		return OK
	}
	code := Of(err)
	if _, told := err.(Status); !told { // a bare status has been told already
		fmt.Fprintf(c.ErrOrStderr(), "%s: %v\n", c.CommandPath(), err)
		if code == Usage {
			fmt.Fprintf(c.ErrOrStderr(), "Run '%s --help' for usage.\n", c.CommandPath())
		}
	}
	return code
}

// prepare makes every command of the tree report command-line mistakes as
// usage errors, and leaves the printing to Execute.
func prepare(c *cobra.Command) {
	c.SilenceErrors, c.SilenceUsage = true, true
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return With(Usage, err) })
	if args := c.Args; args != nil {
		c.Args = func(c *cobra.Command, a []string) error { return With(Usage, args(c, a)) }
	}
	// cobra checks required flags after PreRunE; check them first, as usage.
	pre, preNoErr := c.PreRunE, c.PreRun
	c.PreRunE = func(c *cobra.Command, a []string) error {
		if err := c.ValidateRequiredFlags(); err != nil {
			return With(Usage, err)
		}
		if pre != nil {
			return pre(c, a)
		}
		if preNoErr != nil {
			preNoErr(c, a)
		}
		return nil
	}
	for _, sub := range c.Commands() {
		prepare(sub)
	}
}
