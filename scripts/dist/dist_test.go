package main

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
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

// build builds the binaries stamped with testVersion, stripped to keep
// the archives small.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	const v = "github.com/xpu-timer/xpu-timer/internal/version"
	cmd := exec.Command("go", "build", "-ldflags", "-s -w -X "+v+".Version="+testVersion+" -X "+v+".Revision=0123456789abcdef",
		"-o", dir+"/", "github.com/xpu-timer/xpu-timer/cmd/...")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// TestDist builds every release file from freshly built binaries and checks
// each the way a user would use it: the tarball's listing, the .deb
// installed with dpkg -i, the wheel installed with pip into a venv, the
// OCI image's config and its layer run in a chroot.
func TestDist(t *testing.T) {
	out := t.TempDir()
	f, err := Build(Options{Bin: build(t), Root: "../..", Out: out, Version: testVersion, Revision: "0123456789abcdef", Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("tarball", func(t *testing.T) { checkTarball(t, f.Tarball) })
	t.Run("deb", func(t *testing.T) { checkDeb(t, f.Deb) })
	t.Run("wheel", func(t *testing.T) { checkWheel(t, f.Wheel) })
	t.Run("oci", func(t *testing.T) { checkOCI(t, f.OCI) })
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
			os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm)
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(p), 0o755)
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode)&os.ModePerm)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(w, tr)
			w.Close()
		}
	}
}

func checkTarball(t *testing.T, name string) {
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
	m := entries(t, gz, "")
	top := "xpu-timer-" + testVersion + "-linux-amd64/"
	for _, b := range binaries {
		if m[top+"bin/"+b] != 0o755 {
			t.Errorf("bin/%s: mode %o", b, m[top+"bin/"+b])
		}
	}
	for _, want := range []string{"README.md", "docs/runbook.md", "deploy/prometheus/alerts.yml", "deploy/kubernetes/daemonset.yaml"} {
		if _, ok := m[top+want]; !ok {
			t.Errorf("%s missing", want)
		}
	}
	for n := range m {
		if strings.HasSuffix(n, ".go") || !strings.HasPrefix(n, top) {
			t.Errorf("unexpected entry %s", n)
		}
	}
}

func checkDeb(t *testing.T, name string) {
	info, err := exec.Command("dpkg-deb", "--field", name, "Package", "Version", "Architecture", "Depends").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Package: xpu-timer", "Version: 1.2.3", "Architecture: amd64", "Depends: libc6 (>= 2."} {
		if !strings.Contains(string(info), want) {
			t.Errorf("control %q lacks %q", info, want)
		}
	}
	privileged.Root(t)
	if out, err := exec.Command("dpkg", "-i", name).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "xpu-timer").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge: %v\n%s", err, out)
		}
	})
	for _, b := range binaries {
		out, err := exec.Command("/usr/bin/"+b, "--version").Output()
		if err != nil || !strings.HasPrefix(string(out), b+" "+testVersion+" (revision 0123456789ab") {
			t.Errorf("/usr/bin/%s --version: %q %v", b, out, err)
		}
	}
}

func checkWheel(t *testing.T, name string) {
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
	python := "/root/.pyenv/versions/3.11.7/bin/python3"
	if _, err := os.Stat(python); err != nil {
		privileged.Skip(t, "no "+python+" to install the wheel into a venv")
	}
	venv := t.TempDir()
	// A venv without its own pip (ensurepip is the slow part): the base
	// interpreter's pip installs into it.
	if out, err := exec.Command(python, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	pip := func(args ...string) *exec.Cmd {
		return exec.Command(python, append([]string{"-m", "pip", "--python", venv + "/bin/python", "--disable-pip-version-check"}, args...)...)
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
		out, err := exec.Command(s, "--version").Output()
		if err != nil || !strings.HasPrefix(string(out), s+" "+testVersion) {
			t.Errorf("%s --version: %q %v", s, out, err)
		}
	}
	if out, err := pip("show", wheelName).Output(); err != nil || !strings.Contains(string(out), "Version: 1.2.3") {
		t.Errorf("pip show: %q %v", out, err)
	}
}

func checkOCI(t *testing.T, dir string) {
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
	d := im.Manifests[0]
	if d.Annotations["org.opencontainers.image.ref.name"] != testVersion || d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
		t.Errorf("index entry %+v", d)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil { // digests, sizes, diff ids
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/bin/xpu-timer"}) ||
		!slices.Equal(cfg.Config.Cmd, []string{"agent"}) || cfg.Config.Labels["org.opencontainers.image.version"] != testVersion ||
		cfg.Config.Labels["org.opencontainers.image.revision"] != "0123456789abcdef" {
		t.Errorf("config %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("layer media type %s", mt)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := t.TempDir()
	m := entries(t, rc, root)
	for _, want := range []string{"usr/bin/xpu-timer", "usr/bin/xpu_timer_launch", "usr/bin/xpu_timer_stacktrace_viewer", "lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6"} {
		if m[want]&0o111 == 0 {
			t.Errorf("%s: missing or not executable (mode %o)", want, m[want])
		}
	}
	if m["tmp/"] != 0o1777 {
		t.Errorf("/tmp mode %o", m["tmp/"])
	}
	// The image runs: its entrypoint, in a chroot of its only layer.
	privileged.Root(t)
	cmd := exec.Command("/usr/bin/xpu-timer", "--version")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = cfg.Config.Env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "xpu-timer "+testVersion) {
		t.Errorf("entrypoint --version in the image: %q %v", out, err)
	}
}
