package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/xpu-timer/xpu-timer/timeline"
)

// loadAgent is load for the node agent's binding.
func loadAgent(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	b := BindAgent(fs)
	b.lookup = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	return b.Load()
}

func TestRetention(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want timeline.Retention
	}{
		{want: timeline.Retention{Count: timeline.DefaultRetainCount}},
		{env: map[string]string{"XPU_TIMER_RETAIN_COUNT": "0", "XPU_TIMER_RETAIN_BYTES": "20GiB", "XPU_TIMER_RETAIN_AGE": "7d"},
			want: timeline.Retention{Bytes: 20 << 30, Age: 7 * 24 * time.Hour}},
		{args: []string{"--retain-count=3", "--retain-age=72h", "--retain-bytes=0"}, env: map[string]string{"XPU_TIMER_RETAIN_COUNT": "5", "XPU_TIMER_RETAIN_AGE": "1d"},
			want: timeline.Retention{Count: 3, Age: 72 * time.Hour}},
		{env: map[string]string{"XPU_TIMER_RETAIN_AGE": "3600", "XPU_TIMER_RETAIN_BYTES": "1000"}, want: timeline.Retention{Count: timeline.DefaultRetainCount, Bytes: 1000, Age: time.Hour}},
	} {
		c, _, err := load(t, tc.args, tc.env)
		if err != nil || c.Retain != tc.want {
			t.Errorf("%v %v: %+v, %v; want %+v", tc.args, tc.env, c.Retain, err, tc.want)
		}
	}
}

func TestScopeSettings(t *testing.T) {
	c, err := loadAgent(t, []string{"--namespaces=train, dev", "--command-regex", `train\.py`},
		map[string]string{"XPU_TIMER_NAMESPACES": "ignored", "XPU_TIMER_POD_REGEX": "^llama-", "XPU_TIMER_POD_UIDS": "1F3C9A8E-2B7D-4E61-9C0A-5D8E7F6A4B21"})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Scope
	if s == nil || !reflect.DeepEqual(s.Namespaces, []string{"train", "dev"}) || s.Pod.String() != "^llama-" ||
		!reflect.DeepEqual(s.PodUIDs, []string{"1f3c9a8e-2b7d-4e61-9c0a-5d8e7f6a4b21"}) || s.Command.String() != `train\.py` {
		t.Fatalf("scope %+v", s)
	}
	if c, err := loadAgent(t, nil, nil); err != nil || c.Scope != nil {
		t.Fatalf("no filter: scope %+v, %v", c.Scope, err)
	}
	// The launcher has no filters: its binding does not know them.
	if _, _, err := load(t, []string{"--namespaces=train"}, nil); err == nil {
		t.Fatal("the launcher took --namespaces")
	}
}

func TestInvalidScopeAndRetention(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{args: []string{"--command-regex=train(.py"}, wantErr: `invalid argument "train(.py" for "--command-regex"`},
		{env: map[string]string{"XPU_TIMER_COMMAND_REGEX": "a[b"}, wantErr: `XPU_TIMER_COMMAND_REGEX (--command-regex) from environment XPU_TIMER_COMMAND_REGEX: "a[b": bad regexp`},
		{env: map[string]string{"XPU_TIMER_POD_REGEX": "(?P<x"}, wantErr: "bad regexp"},
		{args: []string{"--namespaces=Train"}, wantErr: "not a Kubernetes namespace name"},
		{env: map[string]string{"XPU_TIMER_NAMESPACES": "a_b"}, wantErr: "not a Kubernetes namespace name"},
		{env: map[string]string{"XPU_TIMER_POD_UIDS": "llama-worker-0"}, wantErr: `"llama-worker-0": not a pod UID`},
		{env: map[string]string{"XPU_TIMER_RETAIN_COUNT": "-1"}, wantErr: "want a count, 0 for no limit"},
		{env: map[string]string{"XPU_TIMER_RETAIN_BYTES": "lots"}, wantErr: "want a positive number of bytes"},
		{args: []string{"--retain-age=soon"}, wantErr: "want seconds"},
		{env: map[string]string{"XPU_TIMER_RETAIN_AGE": "-2d"}, wantErr: "want whole days"},
	} {
		_, err := loadAgent(t, tc.args, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v %v: error %v, want one containing %q", tc.args, tc.env, err, tc.wantErr)
		}
	}
}
