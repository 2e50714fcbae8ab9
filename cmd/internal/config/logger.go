package config

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Log formats (--log.format), as Prometheus exporters name them.
const (
	LogFormatText = "logfmt" // slog's text handler: key=value
	LogFormatJSON = "json"
)

// NewLogger returns the logger the configuration asks for: LoggingDir,
// LogLevel and LogFormat. Close the returned closer when done.
func (c Config) NewLogger(name string) (*slog.Logger, io.Closer, error) {
	return newLogger(c.LoggingDir, name, c.LogLevel, c.LogFormat)
}

// Logger returns a text slog logger for the logging directory dir: "" logs to
// stderr, "stdout" to stdout, anything else to dir/<name>.log (appended;
// the directory is created). Close the returned closer when done.
func Logger(dir, name string, level slog.Leveler) (*slog.Logger, io.Closer, error) {
	return newLogger(dir, name, level, LogFormatText)
}

func newLogger(dir, name string, level slog.Leveler, format string) (*slog.Logger, io.Closer, error) {
	opts := &slog.HandlerOptions{Level: level}
	handler := func(w io.Writer) slog.Handler {
		if format == LogFormatJSON {
			return slog.NewJSONHandler(w, opts)
		}
		return slog.NewTextHandler(w, opts)
	}
	switch dir {
	case "":
		return slog.New(handler(os.Stderr)), io.NopCloser(nil), nil
	case "stdout":
		return slog.New(handler(os.Stdout)), io.NopCloser(nil), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create logging dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open log file: %w", err)
	}
	return slog.New(handler(f)), f, nil
}
