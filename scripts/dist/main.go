// Command dist writes the release files of xpu-timer into one directory
// (`make dist`: dist/), from binaries already built and stamped by make:
//
//	xpu-timer-VERSION-linux-amd64.tar.gz   the binaries, README, docs/, deploy/
//	xpu-timer_VERSION_amd64.deb            /usr/bin/..., built with dpkg-deb
//	py_xpu_timer-VERSION-py3-none-manylinux_X_Y_x86_64.whl
//	                                       the launcher and viewer as scripts on PATH
//	oci/                                   an OCI image layout: the binaries and
//	                                       the C library they link, entrypoint
//	                                       `xpu-timer`, built without a container engine
//
// Usage, from scripts/dist (a module of its own, so that the product's
// go.mod holds only what the binaries link):
//
//	go run . -root ../.. -bin ../../bin -out ../../dist -version v0.1.0 -revision HASH
//
// `make dist` runs it so, with absolute paths.
package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// binaries are the programs shipped, as built into -bin.
var binaries = []string{"xpu_timer_launch", "xpu_timer_stacktrace_viewer", "xpu-timer", "xpu-timer-dump"}

// Options say what to package and where.
type Options struct {
	Bin      string // directory holding the built binaries
	Root     string // the repository, for README.md, docs/ and deploy/
	Out      string // output directory, created
	Version  string // git describe: v0.1.0, v0.1.0-3-gabc, or dev
	Revision string // the full commit hash
	// Fast compresses least (tests); releases compress best.
	Fast bool
}

// gzipLevel is the gzip compression level of the archives.
func (o Options) gzipLevel() int {
	if o.Fast {
		return gzip.BestSpeed
	}
	return gzip.BestCompression
}

// Files are what Build wrote.
type Files struct {
	Tarball, Deb, Wheel, OCI string
}

// Build writes every release file.
func Build(o Options) (Files, error) {
	var f Files
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return f, err
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(o.Bin, b)); err != nil {
			return f, fmt.Errorf("binary %s: %w", b, err)
		}
	}
	var err error
	if f.Tarball, err = writeTarball(o); err != nil {
		return f, fmt.Errorf("tarball: %w", err)
	}
	if f.Deb, err = deb(o); err != nil {
		return f, fmt.Errorf("deb: %w", err)
	}
	if f.Wheel, err = wheel(o); err != nil {
		return f, fmt.Errorf("wheel: %w", err)
	}
	if f.OCI, err = ociLayout(o); err != nil {
		return f, fmt.Errorf("oci image: %w", err)
	}
	return f, nil
}

func main() {
	var o Options
	flag.StringVar(&o.Bin, "bin", "bin", "directory of the built binaries")
	flag.StringVar(&o.Root, "root", ".", "repository root")
	flag.StringVar(&o.Out, "out", "dist", "output directory")
	flag.StringVar(&o.Version, "version", "dev", "version (git describe --tags)")
	flag.StringVar(&o.Revision, "revision", "unknown", "commit hash")
	flag.BoolVar(&o.Fast, "fast", false, "compress least (tests), not best (releases)")
	flag.Parse()
	f, err := Build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
	for _, p := range []string{f.Tarball, f.Deb, f.Wheel, f.OCI} {
		fmt.Println(p)
	}
}
