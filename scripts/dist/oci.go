package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// libDirs are where the binaries' shared libraries are looked up, as the
// dynamic loader of the build machine (Debian, x86-64) does.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"}

// ociLayout writes dist/oci, an OCI image layout holding one image for
// linux/amd64: no base image, one layer with the binaries in /usr/bin and
// the shared libraries they link (the C library and its loader: the
// binaries use cgo for NVML), entrypoint xpu-timer, command agent. The
// index names it by the version (org.opencontainers.image.ref.name), so
// `skopeo copy oci:dist/oci:VERSION docker://...` publishes it.
func ociLayout(o Options) (string, error) {
	var bins []string
	for _, b := range binaries {
		bins = append(bins, filepath.Join(o.Bin, b))
	}
	libs, err := sharedLibraries(bins)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	dir := func(p string, mode int64) error {
		if p == "." || p == "/" || dirs[p] {
			return nil
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(src, dst string, mode int64) error {
		for _, d := range parents(dst) {
			if err := dir(d, 0o755); err != nil {
				return err
			}
		}
		return addFile(tw, src, dst, mode)
	}
	for _, d := range []struct {
		p    string
		mode int64
	}{{"tmp", 0o1777}, {"root", 0o700}, {"root/timeline", 0o755}} {
		if err := dir(d.p, d.mode); err != nil {
			return "", err
		}
	}
	for i, b := range bins {
		if err := file(b, "usr/bin/"+binaries[i], 0o755); err != nil {
			return "", err
		}
	}
	for _, l := range libs {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return "", err
		}
		if err := file(real, l[1:], 0o755); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(o.gzipLevel()))
	if err != nil {
		return "", err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "xpu-timer scripts/dist", Comment: "xpu-timer binaries and their C library"}})
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", "amd64", v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{"/usr/bin/xpu-timer"}
	cfg.Config.Cmd = []string{"agent"}
	cfg.Config.Env = []string{"PATH=/usr/bin:/bin"}
	cfg.Config.WorkingDir = "/"
	cfg.Config.ExposedPorts = map[string]struct{}{"18889/tcp": {}}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "xpu-timer",
		"org.opencontainers.image.description": "Hang detector for distributed GPU training",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      "https://github.com/xpu-timer/xpu-timer",
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	out := filepath.Join(o.Out, "oci")
	if err := os.RemoveAll(out); err != nil {
		return "", err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return "", err
	}
	err = p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}),
		layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.Version}))
	return out, err
}

// parents are the directories above a slash path, outermost first.
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}

// sharedLibraries lists the absolute paths of the program interpreter and
// every library the binaries need, transitively.
func sharedLibraries(bins []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	queue := append([]string(nil), bins...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		f, err := elf.Open(p)
		if err != nil {
			return nil, err
		}
		needed, err := f.ImportedLibraries()
		var interp string
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(prog.Open())
				interp = string(bytes.TrimRight(b, "\x00"))
			}
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		var found []string
		if interp != "" {
			found = append(found, interp)
		}
		for _, n := range needed {
			lib := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, n)); err == nil {
					lib = filepath.Join(d, n)
					break
				}
			}
			if lib == "" {
				return nil, fmt.Errorf("%s needs %s, not found in %v", p, n, libDirs)
			}
			found = append(found, lib)
		}
		for _, l := range found {
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
				queue = append(queue, l)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
