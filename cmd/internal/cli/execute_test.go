package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/cmd/internal/dumpcmd"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/cmd/internal/launch"
	"github.com/xpu-timer/xpu-timer/cmd/internal/viewercmd"
)

// The exit statuses of docs/usage.md's table, for each binary, driven the way
// main does: Execute on a fresh command tree.
func TestExitStatuses(t *testing.T) {
	empty := t.TempDir()
	binaries := map[string]func() *cobra.Command{
		"xpu-timer":                   NewRoot,
		"xpu_timer_launch":            launch.New,
		"xpu_timer_stacktrace_viewer": viewercmd.New,
		"xpu-timer-dump":              func() *cobra.Command { return dumpcmd.Standalone([]string{"xpu-timer-dump"}) },
		// As xpu-timer hands it `xpu-timer dump` (cmd/internal/leandump).
		"xpu-timer-dump as xpu-timer": func() *cobra.Command { return dumpcmd.Standalone([]string{"xpu-timer", "dump"}) },
	}
	for _, tc := range []struct {
		bin    string
		args   []string
		want   int
		stderr string // a part of what is printed on stderr
		stdout string
	}{
		{bin: "xpu-timer", args: []string{"--version"}, want: exitcode.OK, stdout: "xpu-timer dev (revision "},
		{bin: "xpu_timer_launch", args: []string{"--version"}, want: exitcode.OK, stdout: "xpu_timer_launch dev (revision "},
		{bin: "xpu_timer_stacktrace_viewer", args: []string{"--version"}, want: exitcode.OK, stdout: "xpu_timer_stacktrace_viewer dev (revision "},
		{bin: "xpu-timer-dump", args: []string{"--version"}, want: exitcode.OK, stdout: "xpu-timer-dump dev (revision "},
		{bin: "xpu-timer-dump", args: nil, want: exitcode.Usage, stderr: "--pid is required"},
		{bin: "xpu-timer-dump", args: []string{"--pid", "999999999"}, want: exitcode.NoProcess, stderr: "process 999999999 does not exist"},
		{bin: "xpu-timer-dump as xpu-timer", args: []string{"dump"}, want: exitcode.Usage, stderr: "xpu-timer dump: --pid is required\nRun 'xpu-timer dump --help' for usage."},
		{bin: "xpu-timer-dump as xpu-timer", args: []string{"dump", "--pid", "999999999"}, want: exitcode.NoProcess, stderr: "xpu-timer dump: process 999999999 does not exist"},

		{bin: "xpu-timer", args: nil, want: exitcode.Usage, stderr: "xpu-timer: no command given"},
		{bin: "xpu-timer", args: []string{"bogus"}, want: exitcode.Usage, stderr: `unknown command "bogus"`},
		{bin: "xpu-timer", args: []string{"--bogus"}, want: exitcode.Usage, stderr: "unknown flag: --bogus"},
		{bin: "xpu-timer", args: []string{"watch", "--bogus"}, want: exitcode.Usage, stderr: "xpu-timer watch: unknown flag: --bogus"},
		{bin: "xpu-timer", args: []string{"watch", "--timeout", "3s"}, want: exitcode.Usage, stderr: "give either --pid"},
		{bin: "xpu-timer", args: []string{"watch", "--timeout", "soon", "--pid", "1"}, want: exitcode.Usage, stderr: "soon"},
		{bin: "xpu-timer", args: []string{"watch", "--pid", "x"}, want: exitcode.Usage, stderr: "invalid argument"},
		{bin: "xpu-timer", args: []string{"dump"}, want: exitcode.Usage, stderr: "--pid is required"},
		{bin: "xpu-timer", args: []string{"dump", "--pid", "1", "extra"}, want: exitcode.Usage, stderr: `unknown command "extra"`},
		{bin: "xpu-timer", args: []string{"dump", "--pid", "4194999"}, want: exitcode.NoProcess, stderr: "process 4194999 does not exist"},
		{bin: "xpu-timer", args: []string{"agent", "extra"}, want: exitcode.Usage, stderr: `unknown command "extra"`},
		{bin: "xpu-timer", args: []string{"agent", "--hang-timeout=-1"}, want: exitcode.Usage, stderr: "must be positive"},
		{bin: "xpu-timer", args: []string{"agent", "--scan-interval", "often"}, want: exitcode.Usage, stderr: "invalid argument"},
		{bin: "xpu-timer", args: []string{"agent", "--command-regex", "train(.py"}, want: exitcode.Usage, stderr: "bad regexp: error parsing regexp: missing closing )"},
		{bin: "xpu-timer", args: []string{"agent", "--namespaces", "Train"}, want: exitcode.Usage, stderr: `"Train": not a Kubernetes namespace name`},
		{bin: "xpu-timer", args: []string{"agent", "--pod-uids", "llama-0"}, want: exitcode.Usage, stderr: "not a pod UID"},
		{bin: "xpu-timer", args: []string{"agent", "--retain-count", "-3"}, want: exitcode.Usage, stderr: "want a count"},
		{bin: "xpu_timer_launch", args: []string{"--command-regex", "x", "true"}, want: exitcode.Usage, stderr: "unknown flag: --command-regex"},

		{bin: "xpu_timer_launch", args: nil, want: exitcode.Usage, stderr: "xpu_timer_launch: no command given\nRun 'xpu_timer_launch --help' for usage."},
		{bin: "xpu_timer_launch", args: []string{"--bogus", "true"}, want: exitcode.Usage, stderr: "unknown flag: --bogus"},
		{bin: "xpu_timer_launch", args: []string{"--hang-timeout=abc", "true"}, want: exitcode.Usage, stderr: `invalid argument "abc"`},

		// Without --path the viewer reads ./, as xpu_timer's does: here, no dumps.
		{bin: "xpu_timer_stacktrace_viewer", args: nil, want: exitcode.Failure, stderr: "no readable *.stacktrace files in ./"},
		{bin: "xpu_timer_stacktrace_viewer", args: []string{"--path", empty, "extra"}, want: exitcode.Usage, stderr: `unknown command "extra"`},
		{bin: "xpu_timer_stacktrace_viewer", args: []string{"--path", empty, "--weight", "x"}, want: exitcode.Usage, stderr: "want stacks or ranks"},
		{bin: "xpu_timer_stacktrace_viewer", args: []string{"--path", empty, "--width", "1"}, want: exitcode.Usage, stderr: "want at least 200"},
		{bin: "xpu_timer_stacktrace_viewer", args: []string{"--bogus"}, want: exitcode.Usage, stderr: "unknown flag"},
		{bin: "xpu_timer_stacktrace_viewer", args: []string{"--path", filepath.Join(empty, "none")}, want: exitcode.Failure, stderr: "xpu_timer_stacktrace_viewer: "},
	} {
		t.Run(tc.bin+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := binaries[tc.bin]()
			var out, errb bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&errb)
			cmd.SetArgs(tc.args)
			if tc.args == nil {
				cmd.SetArgs([]string{})
			}
			got := exitcode.Execute(cmd)
			if got != tc.want || !strings.Contains(errb.String(), tc.stderr) || !strings.Contains(out.String(), tc.stdout) {
				t.Fatalf("exit %d, want %d\nstdout %q (want %q)\nstderr %q (want %q)", got, tc.want, out.String(), tc.stdout, errb.String(), tc.stderr)
			}
			if tc.want == exitcode.Usage && !strings.Contains(errb.String(), "--help' for usage.") {
				t.Errorf("usage error without the pointer to --help: %q", errb.String())
			}
		})
	}
}

// A bad filter or retention setting from the environment stops the agent
// as a usage error too, naming the variable.
func TestAgentBadEnvironment(t *testing.T) {
	for env, want := range map[string]string{
		"XPU_TIMER_POD_REGEX":    "XPU_TIMER_POD_REGEX (--pod-regex) from environment XPU_TIMER_POD_REGEX: \"a[\": bad regexp",
		"XPU_TIMER_RETAIN_BYTES": "XPU_TIMER_RETAIN_BYTES (--retain-bytes) from environment XPU_TIMER_RETAIN_BYTES",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "a[")
			cmd := NewRoot()
			var errb bytes.Buffer
			cmd.SetOut(&errb)
			cmd.SetErr(&errb)
			cmd.SetArgs([]string{"agent"})
			if got := exitcode.Execute(cmd); got != exitcode.Usage || !strings.Contains(errb.String(), want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", got, errb.String(), exitcode.Usage, want)
			}
		})
	}
}
