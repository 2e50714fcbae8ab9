package config

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/pflag"
)

// Source says where a setting's value came from.
type Source string

// Sources, strongest first.
const (
	SourceFlag     Source = "flag"
	SourceEnv      Source = "environment"
	SourceFile     Source = "config file"
	SourcePlatform Source = "platform environment" // ELASTIC_JOB_NAME, POD_NAME, ...
	SourceDefault  Source = "default"
)

// Setting is one resolved variable, for printing the effective configuration.
type Setting struct {
	Env    string // XPU_TIMER_* name
	Flag   string // flag name without dashes
	Value  string // raw value as given ("" when unset)
	Source Source // where Value came from
	Origin string // the variable or file that supplied it, when not the flag
}

// Binding ties the flags registered on a FlagSet to the environment and the
// config file. Load resolves them.
type Binding struct {
	fs       *pflag.FlagSet
	vars     []*variable           // the variables bound, in flag order
	values   map[string]*flagValue // by env name
	lookup   func(string) (string, bool)
	settings []Setting
}

// flagValue is a pflag.Value that records the raw text; parsing and checks
// happen in Load so flag, environment and file values share one path.
type flagValue struct {
	v   *variable
	raw string
}

func (f *flagValue) String() string { return f.raw }
func (f *flagValue) Type() string   { return f.v.kind }
func (f *flagValue) Set(s string) error {
	var c Config
	if err := f.v.set(&c, s); err != nil {
		return err
	}
	f.raw = s
	return nil
}

// Bind registers one flag per XPU_TIMER_* variable on fs, the node
// agent's own (its process filters) left out.
func Bind(fs *pflag.FlagSet) *Binding { return bind(fs, false) }

// BindAgent registers one flag per XPU_TIMER_* variable on fs, the node
// agent's own included.
func BindAgent(fs *pflag.FlagSet) *Binding { return bind(fs, true) }

func bind(fs *pflag.FlagSet, agent bool) *Binding {
	b := &Binding{fs: fs, values: make(map[string]*flagValue), lookup: os.LookupEnv}
	for i := range variables {
		v := &variables[i]
		if v.agent && !agent {
			continue
		}
		b.vars = append(b.vars, v)
		fv := &flagValue{v: v}
		b.values[v.env] = fv
		f := fs.VarPF(fv, v.flag, "", fmt.Sprintf("%s [$%s]", v.usage, v.env))
		if v.def != "" {
			f.DefValue = v.def
		}
		if v.kind == "bool" {
			f.NoOptDefVal = "true"
		}
	}
	return b
}

// Load resolves every variable: flag, then environment, then the config file
// (named by --config or XPU_TIMER_CONFIG), then the default. It fails on
// the first value it refuses.
func (b *Binding) Load() (Config, error) {
	cfg, bad := b.load()
	if len(bad) > 0 {
		return Config{}, bad[0]
	}
	return cfg, nil
}

// LoadLenient resolves every variable as Load does, but never fails: a
// value Load would refuse (from the environment or the config file; a
// flag's was checked when the flags were parsed), and a config file that
// cannot be read, is reported in bad, one error per setting, and the
// setting takes its default. The launcher uses it: a setting never stops
// the job.
func (b *Binding) LoadLenient() (cfg Config, bad []*Invalid) {
	return b.load()
}

// Invalid is a setting Load refused.
type Invalid struct {
	Setting        // the value refused and where it came from
	Default string // what LoadLenient took instead ("" when unset)
	Err     error
}

func (e *Invalid) Error() string {
	if e.Env == "XPU_TIMER_CONFIG" {
		return fmt.Sprintf("config file from %s: %v", e.describe(), e.Err)
	}
	return fmt.Sprintf("%s (--%s) from %s: %v", e.Env, e.Flag, e.describe(), e.Err)
}

func (e *Invalid) Unwrap() error { return e.Err }

func (b *Binding) load() (Config, []*Invalid) {
	var cfg Config
	var bad []*Invalid
	var file map[string]string
	fileName, fileSrc, fileOrigin := b.raw("XPU_TIMER_CONFIG")
	if fileName != "" {
		var err error
		if file, err = ReadFile(fileName); err != nil {
			bad = append(bad, &Invalid{Setting: Setting{Env: "XPU_TIMER_CONFIG", Flag: "config", Value: fileName, Source: fileSrc, Origin: fileOrigin}, Err: err})
		}
	}
	b.settings = b.settings[:0]
	portSet := false
	for _, v := range b.vars {
		s := Setting{Env: v.env, Flag: v.flag}
		fv := b.values[v.env]
		switch {
		case b.fs.Changed(v.flag):
			s.Value, s.Source = fv.raw, SourceFlag
		default:
			if val, ok := b.lookup(v.env); ok && val != "" {
				s.Value, s.Source, s.Origin = val, SourceEnv, v.env
				break
			}
			if val, ok := file[v.env]; ok {
				s.Value, s.Source, s.Origin = val, SourceFile, fileName
				break
			}
			for _, name := range v.fallbacks {
				if val, ok := b.lookup(name); ok && val != "" {
					s.Value, s.Source, s.Origin = val, SourcePlatform, name
					break
				}
			}
			if s.Source == "" {
				s.Value, s.Source = v.def, SourceDefault
			}
		}
		if s.Source != SourceDefault || s.Value != "" {
			if err := v.set(&cfg, s.Value); err != nil {
				bad = append(bad, &Invalid{Setting: s, Default: v.def, Err: err})
				s = Setting{Env: v.env, Flag: v.flag, Value: v.def, Source: SourceDefault}
				if v.def != "" {
					v.set(&cfg, v.def)
				}
			}
		}
		if v.env == "XPU_TIMER_PORT" && s.Source != SourceDefault {
			portSet = true
		}
		b.settings = append(b.settings, s)
	}
	if !portSet {
		if cfg.BasePort >= 65535 {
			s, _ := b.Lookup("XPU_TIMER_BASEPORT")
			bad = append(bad, &Invalid{Setting: s, Default: strconv.Itoa(DefaultBasePort),
				Err: fmt.Errorf("XPU_TIMER_PORT unset and XPU_TIMER_BASEPORT %d has no next port", cfg.BasePort)})
			cfg.BasePort = DefaultBasePort
			b.set("XPU_TIMER_BASEPORT", strconv.Itoa(DefaultBasePort))
		}
		cfg.Port = cfg.BasePort + 1
		b.set("XPU_TIMER_PORT", fmt.Sprint(cfg.Port))
	}
	return cfg, bad
}

func (s Setting) describe() string {
	if s.Origin != "" {
		return fmt.Sprintf("%s %s", s.Source, s.Origin)
	}
	return string(s.Source)
}

// raw returns the flag or environment value of one variable, with its
// source and origin (used for the config file's own name, which cannot
// come from the file).
func (b *Binding) raw(env string) (string, Source, string) {
	v := b.values[env]
	if b.fs.Changed(v.v.flag) {
		return v.raw, SourceFlag, ""
	}
	if val, ok := b.lookup(env); ok && val != "" {
		return val, SourceEnv, env
	}
	return "", "", ""
}

func (b *Binding) set(env, value string) {
	for i := range b.settings {
		if b.settings[i].Env == env {
			b.settings[i].Value = value
		}
	}
}

// Settings returns every variable as resolved by the last Load, in flag order.
func (b *Binding) Settings() []Setting { return append([]Setting(nil), b.settings...) }

// Lookup returns the setting of one XPU_TIMER_* variable as resolved by the
// last Load.
func (b *Binding) Lookup(env string) (Setting, bool) {
	for _, s := range b.settings {
		if s.Env == env {
			return s, true
		}
	}
	return Setting{}, false
}

// Environ resolves the configuration of a process with environment env,
// without flags: what the launcher would have used had it run that process.
func Environ(env map[string]string) (Config, error) {
	b := Bind(pflag.NewFlagSet("environ", pflag.ContinueOnError))
	b.lookup = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return b.Load()
}
