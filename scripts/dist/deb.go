package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// deb writes xpu-timer_VERSION_amd64.deb with dpkg-deb: the binaries in
// /usr/bin, README, usage, limits and runbook in /usr/share/doc/xpu-timer.
func deb(o Options) (string, error) {
	stage, err := os.MkdirTemp("", "xpu-timer-deb")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	var bins []string
	for _, b := range binaries {
		src := filepath.Join(o.Bin, b)
		bins = append(bins, src)
		if err := copyFile(src, filepath.Join(stage, "usr/bin", b), 0o755); err != nil {
			return "", err
		}
	}
	for _, doc := range []string{"README.md", "docs/usage.md", "docs/limits.md", "docs/runbook.md", "docs/release.md"} {
		if err := copyFile(filepath.Join(o.Root, doc), filepath.Join(stage, "usr/share/doc/xpu-timer", filepath.Base(doc)), 0o644); err != nil {
			return "", err
		}
	}
	major, minor, err := glibcNeeded(bins)
	if err != nil {
		return "", err
	}
	version := debVersion(o.Version)
	control := fmt.Sprintf(`Package: xpu-timer
Version: %s
Architecture: amd64
Maintainer: xpu-timer developers <xpu-timer@users.noreply.github.com>
Depends: libc6 (>= %d.%d)
Section: utils
Priority: optional
Homepage: https://github.com/xpu-timer/xpu-timer
Description: hang detector for distributed GPU training
 xpu_timer_launch runs a training job and finds the rank that hangs from
 eBPF probes on CUDA and NCCL, dumps every rank's native and Python stacks
 and serves Prometheus metrics; xpu_timer_stacktrace_viewer merges the
 dumps into flame graphs; xpu-timer watches, dumps and runs the node agent.
 Built from revision %s.
`, version, major, minor, o.Revision)
	if err := os.MkdirAll(filepath.Join(stage, "DEBIAN"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(stage, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		return "", err
	}
	name := filepath.Join(o.Out, "xpu-timer_"+version+"_amd64.deb")
	args := []string{"-Zxz"}
	if o.Fast {
		args = []string{"-Zgzip", "-z1"}
	}
	args = append(args, "--root-owner-group", "--build", stage, name)
	out, err := exec.Command("dpkg-deb", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("dpkg-deb: %v: %s", err, out)
	}
	return name, nil
}

// copyFile copies src to dst (creating its directory) with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		return err
	}
	return os.Chmod(dst, mode) // not the umask's
}
