package config

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/timer"
)

// load binds a fresh flag set, parses args and loads with env as the whole
// environment.
func load(t *testing.T, args []string, env map[string]string) (Config, *Binding, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	b := Bind(fs)
	b.lookup = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := fs.Parse(args); err != nil {
		return Config{}, b, err
	}
	c, err := b.Load()
	return c, b, err
}

// defaults is the configuration with nothing set.
func defaults() Config {
	return Config{
		Settings: agent.Settings{HangTimeout: timer.DefaultHangTimeout, LagWarn: agent.DefaultLagWarn, TimelinePath: timeline.DefaultPath, Port: DefaultBasePort + 1,
			PushInterval: metrics.DefaultPushInterval, SymbolCacheBytes: symbols.DefaultCacheBytes, ProbeRingBytes: ebpf.DefaultRingBytes,
			StallWatch: true, KernelNames: true, CopyEventProbes: true, Retain: timeline.Retention{Count: timeline.DefaultRetainCount}},
		BasePort: DefaultBasePort, LogFormat: LogFormatText,
	}
}

func TestDefaults(t *testing.T) {
	c, b, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The defaults spelled out: they are the documented ones.
	want := Config{
		Settings: agent.Settings{HangTimeout: 300 * time.Second, LagWarn: 30 * time.Second, TimelinePath: "/root/timeline", Port: 18889, PushInterval: 15 * time.Second,
			SymbolCacheBytes: symbols.DefaultCacheBytes, ProbeRingBytes: ebpf.DefaultRingBytes, StallWatch: true, KernelNames: true, CopyEventProbes: true, Retain: timeline.Retention{Count: 10}},
		BasePort: 18888, LogFormat: "logfmt",
	}
	if !reflect.DeepEqual(c, want) || !reflect.DeepEqual(c, defaults()) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if got := c.ListenAddresses(); !reflect.DeepEqual(got, []string{":18889"}) {
		t.Fatalf("listen addresses %v", got)
	}
	s, ok := b.Lookup("XPU_TIMER_PORT")
	if !ok || s.Value != "18889" || s.Source != SourceDefault {
		t.Fatalf("port setting %+v", s)
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "xpu.conf")
	os.WriteFile(file, []byte("# comment\nXPU_TIMER_HANG_TIMEOUT=10\nXPU_TIMER_TIMELINE_PATH = /from/file\nXPU_TIMER_BASEPORT=2000\nXPU_TIMER_JOB_NAME=filejob\nUNRELATED=1\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want func(c *Config)
		src  map[string]Source
	}{
		{name: "file over default", env: map[string]string{"XPU_TIMER_CONFIG": file},
			want: func(c *Config) {
				c.HangTimeout, c.TimelinePath, c.BasePort, c.Port, c.ConfigFile, c.JobName = 10*time.Second, "/from/file", 2000, 2001, file, "filejob"
			},
			src: map[string]Source{"XPU_TIMER_HANG_TIMEOUT": SourceFile, "XPU_TIMER_CONFIG": SourceEnv, "XPU_TIMER_PORT": SourceDefault}},
		{name: "env over file", env: map[string]string{"XPU_TIMER_CONFIG": file, "XPU_TIMER_HANG_TIMEOUT": "5s", "ELASTIC_JOB_NAME": "dlrover"},
			want: func(c *Config) {
				c.HangTimeout, c.TimelinePath, c.BasePort, c.Port, c.ConfigFile, c.JobName = 5*time.Second, "/from/file", 2000, 2001, file, "filejob"
			},
			src: map[string]Source{"XPU_TIMER_HANG_TIMEOUT": SourceEnv, "XPU_TIMER_JOB_NAME": SourceFile}},
		{name: "flag over env", args: []string{"--config", file, "--hang-timeout=7", "--port", "9999", "--hang-kill", "--libraries", "/a.so, /b.so"},
			env: map[string]string{"XPU_TIMER_HANG_TIMEOUT": "5s", "XPU_TIMER_PORT": "1", "XPU_TIMER_HANG_KILL": "false"},
			want: func(c *Config) {
				c.HangTimeout, c.TimelinePath, c.BasePort, c.Port, c.ConfigFile, c.JobName = 7*time.Second, "/from/file", 2000, 9999, file, "filejob"
				c.HangKill, c.Libraries = true, []string{"/a.so", "/b.so"}
			},
			src: map[string]Source{"XPU_TIMER_HANG_TIMEOUT": SourceFlag, "XPU_TIMER_PORT": SourceFlag, "XPU_TIMER_CONFIG": SourceFlag}},
		{name: "platform labels", env: map[string]string{"ELASTIC_JOB_NAME": "dlrover", "JOB_NAME": "other", "POD_NAME": "pod-0", "HOSTNAME": "h", "POD_IP": "10.0.0.3"},
			want: func(c *Config) { c.JobName, c.PodName, c.IP = "dlrover", "pod-0", "10.0.0.3" },
			src:  map[string]Source{"XPU_TIMER_JOB_NAME": SourcePlatform, "XPU_TIMER_IP": SourcePlatform}},
		{name: "own label names win", env: map[string]string{"XPU_TIMER_JOB_NAME": "mine", "ELASTIC_JOB_NAME": "dlrover", "HOSTNAME": "h"},
			want: func(c *Config) { c.JobName, c.PodName = "mine", "h" }},
		{name: "pushgateway and interval", env: map[string]string{"XPU_TIMER_PUSHGATEWAY": "http://pgw:9091", "XPU_TIMER_PUSH_INTERVAL": "30s", "XPU_TIMER_DEBUG_MODE": "1", "XPU_TIMER_LOGGING_DIR": "stdout"},
			want: func(c *Config) {
				c.Pushgateway, c.PushInterval, c.DebugMode, c.LoggingDir = "http://pgw:9091", 30*time.Second, true, "stdout"
			}},
		{name: "exporter conventions", args: []string{"--web.listen-address=127.0.0.1:9400, [::1]:9400", "--log.level=debug"},
			env: map[string]string{"XPU_TIMER_WEB_CONFIG_FILE": "/etc/xpu-timer/web.yml", "XPU_TIMER_LOG_FORMAT": "json", "XPU_TIMER_METRICS_TOP_KERNELS": "20"},
			want: func(c *Config) {
				c.WebListenAddresses, c.WebConfigFile = []string{"127.0.0.1:9400", "[::1]:9400"}, "/etc/xpu-timer/web.yml"
				c.LogLevel, c.LogFormat = slog.LevelDebug, "json"
				c.TopKernels = 20
			}},
		{name: "port zero picks free port", env: map[string]string{"XPU_TIMER_PORT": "0"}, want: func(c *Config) { c.Port = 0 }},
		{name: "lag warning off", env: map[string]string{"XPU_TIMER_LAG_WARN": "0"}, want: func(c *Config) { c.LagWarn = 0 }},
		{name: "lag warning as a flag over env", args: []string{"--lag-warn", "1m"}, env: map[string]string{"XPU_TIMER_LAG_WARN": "10"},
			want: func(c *Config) { c.LagWarn = time.Minute }, src: map[string]Source{"XPU_TIMER_LAG_WARN": SourceFlag}},
		{name: "empty env counts as unset", env: map[string]string{"XPU_TIMER_HANG_TIMEOUT": ""}, want: func(c *Config) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, b, err := load(t, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			want := defaults()
			tc.want(&want)
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("got  %+v\nwant %+v", c, want)
			}
			for env, src := range tc.src {
				if s, _ := b.Lookup(env); s.Source != src {
					t.Errorf("%s: source %q, want %q", env, s.Source, src)
				}
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.conf")
	os.WriteFile(bad, []byte("XPU_TIMER_HANG_TIMEOUT=10\nthis line has no equals\n"), 0o644)
	badValue := filepath.Join(dir, "badvalue.conf")
	os.WriteFile(badValue, []byte("XPU_TIMER_HANG_KILL=maybe\n"), 0o644)
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		is      error
	}{
		{name: "timeout word", env: map[string]string{"XPU_TIMER_HANG_TIMEOUT": "soon"}, wantErr: `XPU_TIMER_HANG_TIMEOUT (--hang-timeout) from environment XPU_TIMER_HANG_TIMEOUT: "soon": want seconds`},
		{name: "timeout negative", env: map[string]string{"XPU_TIMER_HANG_TIMEOUT": "-5"}, wantErr: "must be positive"},
		{name: "timeout zero", env: map[string]string{"XPU_TIMER_HANG_TIMEOUT": "0s"}, wantErr: "must be positive"},
		{name: "timeout huge", env: map[string]string{"XPU_TIMER_HANG_TIMEOUT": "1e300"}, wantErr: "too large"},
		{name: "port range", env: map[string]string{"XPU_TIMER_PORT": "70000"}, wantErr: "XPU_TIMER_PORT (--port) from environment XPU_TIMER_PORT: \"70000\": want a port number"},
		{name: "baseport no next", env: map[string]string{"XPU_TIMER_BASEPORT": "65535"}, wantErr: "has no next port"},
		{name: "bool", env: map[string]string{"XPU_TIMER_DEBUG_MODE": "perhaps"}, wantErr: `"perhaps": want true or false`},
		{name: "pushgateway scheme", env: map[string]string{"XPU_TIMER_PUSHGATEWAY": "pgw:9091"}, wantErr: "want an http(s)://host[:port] URL"},
		{name: "flag value", args: []string{"--hang-timeout=abc"}, wantErr: `invalid argument "abc" for "--hang-timeout"`},
		{name: "missing file", env: map[string]string{"XPU_TIMER_CONFIG": filepath.Join(dir, "nope")}, wantErr: "config file from environment XPU_TIMER_CONFIG", is: fs.ErrNotExist},
		{name: "file syntax", args: []string{"--config", bad}, wantErr: "line 2: no '='", is: ErrSyntax},
		{name: "file value", env: map[string]string{"XPU_TIMER_CONFIG": badValue}, wantErr: "from config file " + badValue},
		{name: "listen address", args: []string{"--web.listen-address=9400"}, wantErr: `"9400": want host:port`},
		{name: "listen port", env: map[string]string{"XPU_TIMER_WEB_LISTEN_ADDRESS": ":99999"}, wantErr: "want a port number"},
		{name: "log level", env: map[string]string{"XPU_TIMER_LOG_LEVEL": "loud"}, wantErr: "want debug, info, warn or error"},
		{name: "log format", args: []string{"--log.format=xml"}, wantErr: "want logfmt or json"},
		{name: "top kernels", env: map[string]string{"XPU_TIMER_METRICS_TOP_KERNELS": "-1"}, wantErr: "want a number 0-1024"},
		{name: "empty timeline", args: []string{"--timeline-path="}, wantErr: "empty path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := load(t, tc.args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
		})
	}
}

func TestEveryVariableHasFlag(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindAgent(fs)
	for _, env := range []string{"XPU_TIMER_NAMESPACES", "XPU_TIMER_POD_REGEX", "XPU_TIMER_POD_UIDS", "XPU_TIMER_COMMAND_REGEX", "XPU_TIMER_HANG_TIMEOUT", "XPU_TIMER_TIMELINE_PATH", "XPU_TIMER_HANG_KILL", "XPU_TIMER_PORT",
		"XPU_TIMER_BASEPORT", "XPU_TIMER_CONFIG", "XPU_TIMER_LOGGING_DIR", "XPU_TIMER_DEBUG_MODE", "XPU_TIMER_PUSHGATEWAY",
		"XPU_TIMER_PUSH_INTERVAL", "XPU_TIMER_LIBRARIES", "XPU_TIMER_JOB_NAME", "XPU_TIMER_POD_NAME", "XPU_TIMER_IP",
		"XPU_TIMER_WEB_LISTEN_ADDRESS", "XPU_TIMER_WEB_CONFIG_FILE", "XPU_TIMER_LOG_LEVEL", "XPU_TIMER_LOG_FORMAT", "XPU_TIMER_METRICS_TOP_KERNELS",
		"XPU_TIMER_RETAIN_COUNT", "XPU_TIMER_RETAIN_BYTES", "XPU_TIMER_RETAIN_AGE"} {
		found := false
		fs.VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "[$"+env+"]") {
				found = true
			}
		})
		if !found {
			t.Errorf("no flag for %s", env)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{in: "", want: map[string]string{}},
		{in: "# c\n; c\n\n[xpu]\nA=1\n  B = two words  \nexport C=\"q\"\nD='x'\nE=\nA=2\n", want: map[string]string{"A": "2", "B": "two words", "C": "q", "D": "x", "E": ""}},
		{in: "K=a=b\r\n", want: map[string]string{"K": "a=b"}},
		{in: "=1\n", err: true},
		{in: "1A=1\n", err: true},
		{in: "[open\n", err: true},
		{in: "NOEQUALS\n", err: true},
		{in: "BAD KEY=1\n", err: true},
	} {
		got, err := Parse([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("Parse(%q) error %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("Parse(%q) error %v not ErrSyntax", tc.in, err)
			}
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"A=1\n", "# x\n[s]\nexport B = \"2\"\n", "X", "=", "K='\n", "\xff=\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !strings.Contains(err.Error(), "scan") {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		for k, v := range m {
			if !validKey(k) {
				t.Fatalf("invalid key %q accepted", k)
			}
			if strings.ContainsAny(v, "\n") {
				t.Fatalf("value %q spans lines", v)
			}
		}
	})
}

func TestLogger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	l, c, err := Logger(dir, "agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hello", "k", 1)
	c.Close()
	data, err := os.ReadFile(filepath.Join(dir, "agent.log"))
	if err != nil || !strings.Contains(string(data), "msg=hello k=1") {
		t.Fatalf("log file %q, %v", data, err)
	}
	for _, d := range []string{"", "stdout"} {
		if l, c, err := Logger(d, "x", nil); err != nil || l == nil {
			t.Fatalf("Logger(%q): %v", d, err)
		} else {
			c.Close()
		}
	}
	if _, _, err := Logger("/proc/nonexistent/dir", "x", nil); err == nil {
		t.Fatal("want error for unwritable dir")
	}
}

// Environ resolves another process's labels from its environment, with the
// platform fallbacks.
func TestEnviron(t *testing.T) {
	cfg, err := Environ(map[string]string{"ELASTIC_JOB_NAME": "llama", "POD_NAME": "w-1", "XPU_TIMER_IP": "10.0.0.7", "XPU_TIMER_HANG_TIMEOUT": "5"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobName != "llama" || cfg.PodName != "w-1" || cfg.IP != "10.0.0.7" || cfg.HangTimeout != 5*time.Second {
		t.Errorf("labels %q %q %q, timeout %v", cfg.JobName, cfg.PodName, cfg.IP, cfg.HangTimeout)
	}
}

// LoadLenient takes the default for every value Load refuses, and reports
// each once: the launcher never stops a job over a setting (issue 16).
func TestLoadLenient(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.conf")
	os.WriteFile(bad, []byte("no equals here\n"), 0o644)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want func(c *Config) // the fields the bad values set, at their defaults
		envs []string        // the settings reported
	}{
		{"timeout word", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "abc"}, nil, []string{"XPU_TIMER_HANG_TIMEOUT"}},
		{"timeout negative", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "-5"}, nil, []string{"XPU_TIMER_HANG_TIMEOUT"}},
		{"timeout zero", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "0"}, nil, []string{"XPU_TIMER_HANG_TIMEOUT"}},
		{"timeout negative duration", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "-1s"}, nil, []string{"XPU_TIMER_HANG_TIMEOUT"}},
		{"timeout huge", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "99999999999999999999"}, nil, []string{"XPU_TIMER_HANG_TIMEOUT"}},
		{"timeout 1 ms", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "0.001"}, nil, []string{"XPU_TIMER_HANG_TIMEOUT"}},
		{"timeout 999ms", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "999ms"}, nil, []string{"XPU_TIMER_HANG_TIMEOUT"}},
		{"lag warning word", map[string]string{"XPU_TIMER_LAG_WARN": "soon"}, nil, []string{"XPU_TIMER_LAG_WARN"}},
		{"lag warning negative", map[string]string{"XPU_TIMER_LAG_WARN": "-30"}, nil, []string{"XPU_TIMER_LAG_WARN"}},
		{"lag warning 500ms", map[string]string{"XPU_TIMER_LAG_WARN": "0.5"}, nil, []string{"XPU_TIMER_LAG_WARN"}},
		{"port", map[string]string{"XPU_TIMER_PORT": "70000"}, nil, []string{"XPU_TIMER_PORT"}},
		{"baseport no next", map[string]string{"XPU_TIMER_BASEPORT": "65535"}, nil, []string{"XPU_TIMER_BASEPORT"}},
		{"bool", map[string]string{"XPU_TIMER_HANG_KILL": "maybe"}, nil, []string{"XPU_TIMER_HANG_KILL"}},
		{"pushgateway", map[string]string{"XPU_TIMER_PUSHGATEWAY": "pgw:9091"}, nil, []string{"XPU_TIMER_PUSHGATEWAY"}},
		{"missing file", map[string]string{"XPU_TIMER_CONFIG": filepath.Join(dir, "nope")}, func(c *Config) { c.ConfigFile = filepath.Join(dir, "nope") }, []string{"XPU_TIMER_CONFIG"}},
		{"file syntax", map[string]string{"XPU_TIMER_CONFIG": bad}, func(c *Config) { c.ConfigFile = bad }, []string{"XPU_TIMER_CONFIG"}},
		{"several", map[string]string{"XPU_TIMER_HANG_TIMEOUT": "abc", "XPU_TIMER_PUSH_INTERVAL": "-1", "XPU_TIMER_TIMELINE_PATH": "/ok"},
			func(c *Config) { c.TimelinePath = "/ok" }, []string{"XPU_TIMER_HANG_TIMEOUT", "XPU_TIMER_PUSH_INTERVAL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			b := Bind(fs)
			b.lookup = func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			c, bad := b.LoadLenient()
			want := defaults()
			if tc.want != nil {
				tc.want(&want)
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got %+v\nwant %+v", c, want)
			}
			var envs []string
			for _, inv := range bad {
				envs = append(envs, inv.Env)
				if inv.Err == nil || !strings.Contains(inv.Error(), inv.Env) && inv.Env != "XPU_TIMER_CONFIG" {
					t.Errorf("report %q does not name %s", inv.Error(), inv.Env)
				}
			}
			if !reflect.DeepEqual(envs, tc.envs) {
				t.Errorf("reported %v, want %v", envs, tc.envs)
			}
			if _, err := b.Load(); err == nil {
				t.Error("Load = nil, want the first error")
			}
			for _, s := range b.Settings() {
				if s.Env == "XPU_TIMER_HANG_TIMEOUT" && s.Source == SourceDefault && s.Value != "300" {
					t.Errorf("printed setting %+v, want the default", s)
				}
			}
		})
	}
}

// A bad value typed on the command line is refused when flags are parsed.
func TestFlagTimeoutMinimum(t *testing.T) {
	for _, v := range []string{"0.001", "0", "abc", "-1s"} {
		if _, _, err := load(t, []string{"--hang-timeout", v}, nil); err == nil {
			t.Errorf("--hang-timeout %s accepted", v)
		}
	}
	if c, _, err := load(t, []string{"--hang-timeout", "1"}, nil); err != nil || c.HangTimeout != time.Second {
		t.Errorf("--hang-timeout 1: %v, %v", c.HangTimeout, err)
	}
}

func TestSymbolCacheBytes(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int64
	}{{"1000", 1000}, {"256MiB", 256 << 20}, {"1Gi", 1 << 30}, {" 64 KiB ", 64 << 10}, {"2G", 2 << 30}} {
		c, _, err := load(t, nil, map[string]string{"XPU_TIMER_SYMBOL_CACHE_BYTES": tc.v})
		if err != nil || c.SymbolCacheBytes != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.v, c.SymbolCacheBytes, err, tc.want)
		}
	}
	for _, v := range []string{"0", "-1", "lots", "1TiB", "99999999999GiB", "MiB"} {
		if _, _, err := load(t, []string{"--symbol-cache-bytes", v}, nil); err == nil {
			t.Errorf("--symbol-cache-bytes %q accepted", v)
		}
	}
}

func TestNewLogger(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{LoggingDir: dir, LogFormat: LogFormatJSON}, `"level":"INFO","msg":"hello","k":1}`},
		{Config{LoggingDir: dir, LogFormat: LogFormatText, LogLevel: slog.LevelWarn}, ""},
		{Config{LoggingDir: dir, LogFormat: LogFormatText, LogLevel: slog.LevelDebug}, "level=DEBUG msg=quiet"},
	} {
		os.Remove(filepath.Join(dir, "x.log"))
		l, c, err := tc.c.NewLogger("x")
		if err != nil {
			t.Fatal(err)
		}
		l.Info("hello", "k", 1)
		l.Debug("quiet")
		c.Close()
		data, _ := os.ReadFile(filepath.Join(dir, "x.log"))
		if !strings.Contains(string(data), tc.want) || (tc.want == "" && strings.Contains(string(data), "hello")) {
			t.Errorf("%+v: log %q, want %q", tc.c, data, tc.want)
		}
	}
}
