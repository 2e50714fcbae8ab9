package main

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

func TestVersions(t *testing.T) {
	for _, tc := range []struct{ in, pep, deb string }{
		{"v0.1.0", "0.1.0", "0.1.0"},
		{"v1.2.3-4-gabc123d", "1.2.3.post4+gabc123d", "1.2.3+git4.gabc123d"},
		{"v1.2.3-dirty", "1.2.3+dirty", "1.2.3+dirty"},
		{"v1.2.3-4-gabc123d-dirty", "1.2.3.post4+gabc123d.dirty", "1.2.3+git4.gabc123d+dirty"},
		{"dev", "0.0.0.dev0", "0.0.0~dev"},
		{"v1.2", "0.0.0.dev0", "0.0.0~dev"},
	} {
		if got := pep440(tc.in); got != tc.pep {
			t.Errorf("pep440(%q) = %q, want %q", tc.in, got, tc.pep)
		}
		if got := debVersion(tc.in); got != tc.deb {
			t.Errorf("debVersion(%q) = %q, want %q", tc.in, got, tc.deb)
		}
	}
}

const testVersion = "v1.2.3"

// cloneDist clones the repository's committed HEAD into a temporary
// directory, tags it testVersion and runs `make dist` there, as a user
// building a release from a fresh clone does (uncommitted changes are not
// in it). It returns the clone and the revision stamped.
func cloneDist(t *testing.T) (clone, revision string) {
	t.Helper()
	git := func(dir string, args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	revision = git("../..", "rev-parse", "HEAD")
	clone = filepath.Join(t.TempDir(), "xpu-timer")
	git(".", "clone", "--quiet", "--no-checkout", "--no-tags", "../..", clone) // the tag below is its only one
	git(clone, "checkout", "--quiet", "--detach", revision)
	git(clone, "tag", testVersion)
	cmd := exec.Command("make", "-C", clone, "dist", "DISTFLAGS=-fast")
	// The version and revision come from the clone's git, not from a
	// caller's make.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains([]string{"VERSION", "REVISION", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}, k) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist in a fresh clone: %v\n%s", err, out)
	}
	return clone, revision
}

// TestDist builds dist/ with `make dist` in a fresh clone (static binaries,
// the viewer and xpu-timer-dump, beside dynamic ones) and checks each file
// the way a user would use it: the tarball unpacked, the .deb installed
// into a scratch root with dpkg --root, the wheel installed with pip into
// a fresh venv, the OCI layout's index, manifest and config read and its
// layer run in a chroot; every binary of each answers --version with the
// version and revision stamped.
func TestDist(t *testing.T) {
	clone, revision := cloneDist(t)
	out := filepath.Join(clone, "dist")
	glob := func(pattern string) string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(out, pattern))
		if err != nil || len(m) != 1 {
			t.Fatalf("dist/%s: %v %v", pattern, m, err)
		}
		return m[0]
	}
	f := Files{Tarball: glob("*.tar.gz"), Deb: glob("*.deb"), Wheel: glob("*.whl"), OCI: glob("oci")}
	want := stamp{testVersion, revision}
	t.Run("glibc", func(t *testing.T) { checkGlibc(t, filepath.Join(clone, "bin"), f) })
	t.Run("tarball", func(t *testing.T) { checkTarball(t, f.Tarball, want) })
	t.Run("deb", func(t *testing.T) { checkDeb(t, f.Deb, want) })
	t.Run("wheel", func(t *testing.T) { checkWheel(t, f.Wheel, want) })
	t.Run("oci", func(t *testing.T) { checkOCI(t, f.OCI, want) })
}

// stamp is what every shipped binary's --version must say.
type stamp struct{ version, revision string }

// check runs path --version (in root's chroot when root is not empty)
// and compares its first words with the stamp.
func (s stamp) check(t *testing.T, path, root string, env []string) {
	t.Helper()
	cmd := exec.Command(path, "--version")
	if root != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	want := filepath.Base(path) + " " + s.version + " (revision " + s.revision[:12] + ","
	if err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("%s --version: %q %v, want %q...", path, out, err, want)
	}
}

// checkGlibc: the static binaries need no glibc version; the dynamic ones
// set the .deb's libc6 dependency and the wheel's manylinux tag.
func checkGlibc(t *testing.T, bin string, f Files) {
	for _, b := range []string{"xpu_timer_stacktrace_viewer", "xpu-timer-dump"} {
		if major, minor, err := glibcNeeded([]string{filepath.Join(bin, b)}); err != nil || major != 2 || minor != 17 {
			t.Errorf("%s (static): glibc %d.%d %v, want the 2.17 baseline", b, major, minor, err)
		}
	}
	// The .deb holds both dynamic binaries; the wheel only the launcher.
	major, minor, err := glibcNeeded([]string{filepath.Join(bin, "xpu_timer_launch"), filepath.Join(bin, "xpu-timer")})
	if err != nil || major != 2 || minor <= 17 {
		t.Fatalf("xpu_timer_launch, xpu-timer (dynamic): glibc %d.%d %v", major, minor, err)
	}
	depends, err := exec.Command("dpkg-deb", "--field", f.Deb, "Depends").Output()
	if want := fmt.Sprintf("libc6 (>= %d.%d)", major, minor); err != nil || strings.TrimSpace(string(depends)) != want {
		t.Errorf(".deb Depends %q %v, want %q", depends, err, want)
	}
	if major, minor, err = glibcNeeded([]string{filepath.Join(bin, "xpu_timer_launch")}); err != nil {
		t.Fatal(err)
	}
	if tag := fmt.Sprintf("-py3-none-manylinux_%d_%d_x86_64.whl", major, minor); !strings.HasSuffix(f.Wheel, tag) {
		t.Errorf("wheel %s, want the tag %s", filepath.Base(f.Wheel), tag)
	}
}

// entries lists a tar stream: name -> mode (regular files and directories).
func entries(t *testing.T, r io.Reader, extract string) map[string]int64 {
	t.Helper()
	tr := tar.NewReader(r)
	m := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return m
		}
		if err != nil {
			t.Fatal(err)
		}
		m[h.Name] = h.Mode
		if extract == "" {
			continue
		}
		p := filepath.Join(extract, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm)
		case tar.TypeReg:
			err = extractFile(p, tr, os.FileMode(h.Mode)&os.ModePerm)
		}
		if err != nil {
			t.Fatalf("extract %s: %v", h.Name, err)
		}
	}
}

// extractFile writes the tar entry r at p with mode.
func extractFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

func checkTarball(t *testing.T, name string, want stamp) {
	if filepath.Base(name) != "xpu-timer-"+testVersion+"-linux-amd64.tar.gz" {
		t.Errorf("name %s", name)
	}
	file, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	gz, err := gzip.NewReader(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := entries(t, gz, dir)
	top := "xpu-timer-" + testVersion + "-linux-amd64/"
	for _, b := range binaries {
		if m[top+"bin/"+b] != 0o755 {
			t.Errorf("bin/%s: mode %o", b, m[top+"bin/"+b])
		}
		want.check(t, filepath.Join(dir, top, "bin", b), "", nil)
	}
	checkHandsOver(t, filepath.Join(dir, top, "bin", "xpu-timer"))
	for _, want := range []string{"README.md", "docs/usage.md", "docs/limits.md", "docs/runbook.md", "deploy/prometheus/alerts.yml", "deploy/kubernetes/daemonset.yaml"} {
		if _, ok := m[top+want]; !ok {
			t.Errorf("%s missing", want)
		}
	}
	for n := range m {
		if base := filepath.Base(n); strings.HasSuffix(n, ".go") || base == "go.mod" || base == "go.sum" || !strings.HasPrefix(n, top) {
			t.Errorf("unexpected entry %s", n)
		}
	}
}

func checkDeb(t *testing.T, name string, want stamp) {
	info, err := exec.Command("dpkg-deb", "--field", name, "Package", "Version", "Architecture", "Depends").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Package: xpu-timer", "Version: 1.2.3", "Architecture: amd64", "Depends: libc6 (>= 2."} {
		if !strings.Contains(string(info), want) {
			t.Errorf("control %q lacks %q", info, want)
		}
	}
	// Installed by dpkg into a scratch root with a database of its own,
	// not into this machine's /usr; libc6 is this machine's, so the
	// dependency is forced there.
	privileged.Root(t)
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("dpkg", append([]string{"--root=" + root, "--log=/dev/null", "--force-depends", "--force-script-chrootless"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	dpkg("--install", name)
	listed := dpkg("--listfiles", "xpu-timer")
	for _, b := range binaries {
		if !slices.Contains(strings.Split(listed, "\n"), "/usr/bin/"+b) {
			t.Errorf("dpkg -L lacks /usr/bin/%s:\n%s", b, listed)
		}
		want.check(t, filepath.Join(root, "usr/bin", b), "", nil)
	}
	checkHandsOver(t, filepath.Join(root, "usr/bin/xpu-timer"))
	for _, doc := range []string{"README.md", "usage.md", "limits.md", "runbook.md"} {
		if !slices.Contains(strings.Split(listed, "\n"), "/usr/share/doc/xpu-timer/"+doc) {
			t.Errorf("dpkg -L lacks %s:\n%s", doc, listed)
		}
	}
}

func checkWheel(t *testing.T, name string, want stamp) {
	zr, err := zip.OpenReader(name)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	// RECORD names every other file with its hash and size.
	record := map[string]string{}
	for _, zf := range zr.File {
		r, _ := zf.Open()
		data, _ := io.ReadAll(r)
		r.Close()
		if strings.HasSuffix(zf.Name, ".dist-info/RECORD") {
			sc := bufio.NewScanner(strings.NewReader(string(data)))
			for sc.Scan() {
				path, rest, _ := strings.Cut(sc.Text(), ",")
				record[path] = rest
			}
			continue
		}
		sum := sha256.Sum256(data)
		record[zf.Name+"#"] = fmt.Sprintf("sha256=%s,%d", base64.RawURLEncoding.EncodeToString(sum[:]), len(data))
	}
	for k, v := range record {
		if p, ok := strings.CutSuffix(k, "#"); ok && record[p] != v {
			t.Errorf("RECORD of %s: %q, want %q", p, record[p], v)
		}
	}
	// A fresh venv of Debian's Python (python3-venv, scripts/apt-packages.txt)
	// with its own pip, which installs the wheel offline.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		privileged.Skip(t, "no "+python+" to install the wheel into a venv")
	}
	venv := t.TempDir()
	if out, err := exec.Command(python, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	pip := func(args ...string) *exec.Cmd {
		return exec.Command(venv+"/bin/pip", append([]string{"--disable-pip-version-check"}, args...)...)
	}
	if out, err := pip("install", "--no-index", name).CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	// Found on PATH, as an activated venv has it.
	t.Setenv("PATH", venv+"/bin:"+os.Getenv("PATH"))
	for _, s := range wheelScripts {
		path, err := exec.LookPath(s)
		if err != nil || path != venv+"/bin/"+s {
			t.Errorf("%s on PATH: %q %v", s, path, err)
			continue
		}
		want.check(t, s, "", nil)
	}
	if out, err := pip("show", wheelName).Output(); err != nil || !strings.Contains(string(out), "Version: 1.2.3") {
		t.Errorf("pip show: %q %v", out, err)
	}
}

func checkOCI(t *testing.T, dir string, want stamp) {
	// The layout's marker file, then its index, manifest and config by
	// media type; validate.Image recomputes every digest and size.
	var marker struct {
		Version string `json:"imageLayoutVersion"`
	}
	if data, err := os.ReadFile(filepath.Join(dir, "oci-layout")); err != nil || json.Unmarshal(data, &marker) != nil || marker.Version != "1.0.0" {
		t.Errorf("oci-layout: %q %v", marker.Version, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d manifests", len(im.Manifests))
	}
	if im.MediaType != "" && im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", im.MediaType)
	}
	d := im.Manifests[0]
	if d.MediaType != types.OCIManifestSchema1 || d.Annotations["org.opencontainers.image.ref.name"] != testVersion ||
		d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
		t.Errorf("index entry %+v", d)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil { // digests, sizes, diff ids
		t.Fatal(err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if manifest.MediaType != types.OCIManifestSchema1 || manifest.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("manifest media type %s, config %s", manifest.MediaType, manifest.Config.MediaType)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/bin/xpu-timer"}) ||
		!slices.Equal(cfg.Config.Cmd, []string{"agent"}) || cfg.Config.Labels["org.opencontainers.image.version"] != want.version ||
		cfg.Config.Labels["org.opencontainers.image.revision"] != want.revision {
		t.Errorf("config %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s", mt)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := t.TempDir()
	m := entries(t, rc, root)
	for _, want := range []string{"usr/bin/xpu-timer", "usr/bin/xpu_timer_launch", "usr/bin/xpu_timer_stacktrace_viewer", "usr/bin/xpu-timer-dump",
		"lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6"} {
		if m[want]&0o111 == 0 {
			t.Errorf("%s: missing or not executable (mode %o)", want, m[want])
		}
	}
	if m["tmp/"] != 0o1777 {
		t.Errorf("/tmp mode %o", m["tmp/"])
	}
	// The image runs: every binary (the entrypoint among them), in a
	// chroot of its only layer with the config's environment.
	privileged.Root(t)
	for _, b := range binaries {
		want.check(t, "/usr/bin/"+b, root, cfg.Config.Env)
	}
	// Out of the chroot, which has no /proc: the layer's pair, as a
	// container with /proc mounted runs them.
	checkHandsOver(t, filepath.Join(root, "usr/bin/xpu-timer"))
}

// checkHandsOver checks that the shipped xpu-timer at path runs `dump` as
// the xpu-timer-dump shipped beside it (cmd/internal/leandump), and runs
// other commands itself: it runs each traced (ptrace), and reads which
// program the process runs after an exec.
func checkHandsOver(t *testing.T, path string) {
	t.Helper()
	privileged.Root(t)
	lean := filepath.Join(filepath.Dir(path), "xpu-timer-dump")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dump", "--help"}, lean},
		{[]string{"dump", "--pid", "999999999"}, lean},
		{[]string{"--version"}, path},
		{[]string{"watch", "--help"}, path},
	} {
		if got := ranAs(t, path, tc.args...); got != tc.want {
			t.Errorf("%s %q ran %s, want %s", path, tc.args, got, tc.want)
		}
	}
}

// ranAs runs path with args, traced, and returns the program it ran last:
// path, or what it executed (PTRACE_EVENT_EXEC).
func ranAs(t *testing.T, path string, args ...string) string {
	t.Helper()
	// Every ptrace request comes from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var ws syscall.WaitStatus
	wait := func() {
		t.Helper()
		if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
			cmd.Process.Kill()
			t.Fatalf("wait %d: %v", pid, err)
		}
	}
	wait() // stopped at the exec of path
	if err := syscall.PtraceSetOptions(pid, syscall.PTRACE_O_TRACEEXEC); err != nil {
		cmd.Process.Kill()
		t.Fatalf("ptrace options: %v", err)
	}
	ran, sig := path, 0
	for {
		if err := syscall.PtraceCont(pid, sig); err != nil {
			cmd.Process.Kill()
			t.Fatalf("ptrace cont: %v", err)
		}
		wait()
		switch {
		case ws.Exited() || ws.Signaled():
			return ran
		case ws.Stopped() && ws.TrapCause() == syscall.PTRACE_EVENT_EXEC:
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if err != nil {
				cmd.Process.Kill()
				t.Fatal(err)
			}
			ran, sig = exe, 0
		case ws.Stopped():
			sig = int(ws.StopSignal()) // the program's own, delivered
		}
	}
}
