package main

import (
	"archive/zip"
	"compress/flate"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// wheelName is the distribution's name: DLRover users install xpu_timer's
// wheel as py_xpu_timer, so ours is a drop-in for it.
const wheelName = "py_xpu_timer"

// wheelScripts are put on PATH by pip, as the wheel's data scripts.
var wheelScripts = []string{"xpu_timer_launch", "xpu_timer_stacktrace_viewer"}

// wheel writes a wheel (PEP 427) by hand: no Python code, the binaries as
// scripts in the .data directory, so `pip install` puts them in the
// environment's bin. The platform tag is the manylinux one of the newest
// glibc symbol the binaries use.
func wheel(o Options) (string, error) {
	var bins []string
	for _, s := range wheelScripts {
		bins = append(bins, filepath.Join(o.Bin, s))
	}
	major, minor, err := glibcNeeded(bins)
	if err != nil {
		return "", err
	}
	version := pep440(o.Version)
	tag := fmt.Sprintf("py3-none-manylinux_%d_%d_x86_64", major, minor)
	base := wheelName + "-" + version
	name := filepath.Join(o.Out, base+"-"+tag+".whl")
	f, err := os.Create(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, o.gzipLevel()) })
	var record strings.Builder
	add := func(path string, data []byte, mode os.FileMode) error {
		h := &zip.FileHeader{Name: path, Method: zip.Deflate, Modified: epoch}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", path, base64.RawURLEncoding.EncodeToString(sum[:]), len(data))
		return nil
	}
	for i, s := range wheelScripts {
		data, err := os.ReadFile(bins[i])
		if err != nil {
			return "", err
		}
		if err := add(base+".data/scripts/"+s, data, 0o755); err != nil {
			return "", err
		}
	}
	info := base + ".dist-info/"
	metadata := fmt.Sprintf(`Metadata-Version: 2.1
Name: %s
Version: %s
Summary: xpu-timer: hang detector for distributed GPU training (xpu_timer_launch, xpu_timer_stacktrace_viewer)
Home-page: https://github.com/xpu-timer/xpu-timer
Requires-Python: >=3.6
Description-Content-Type: text/plain

Puts xpu_timer_launch and xpu_timer_stacktrace_viewer on PATH: Go programs
for x86-64 Linux, built from revision %s. Run a job under
"xpu_timer_launch torchrun ..." and merge the hang dumps with
"xpu_timer_stacktrace_viewer --path DIR".
`, wheelName, version, o.Revision)
	wheelMeta := "Wheel-Version: 1.0\nGenerator: xpu-timer scripts/dist\nRoot-Is-Purelib: false\nTag: " + tag + "\n"
	if err := add(info+"METADATA", []byte(metadata), 0o644); err != nil {
		return "", err
	}
	if err := add(info+"WHEEL", []byte(wheelMeta), 0o644); err != nil {
		return "", err
	}
	record.WriteString(info + "RECORD,,\n")
	h := &zip.FileHeader{Name: info + "RECORD", Method: zip.Deflate, Modified: epoch}
	h.SetMode(0o644)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return "", err
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return name, f.Close()
}
