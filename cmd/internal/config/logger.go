package config

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Logger returns a text slog logger for the logging directory dir: "" logs to
// stderr, "stdout" to stdout, anything else to dir/<name>.log (appended;
// the directory is created). Close the returned closer when done.
func Logger(dir, name string, level slog.Leveler) (*slog.Logger, io.Closer, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch dir {
	case "":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), io.NopCloser(nil), nil
	case "stdout":
		return slog.New(slog.NewTextHandler(os.Stdout, opts)), io.NopCloser(nil), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create logging dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open log file: %w", err)
	}
	return slog.New(slog.NewTextHandler(f, opts)), f, nil
}
