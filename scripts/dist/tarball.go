package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeTarball writes xpu-timer-VERSION-linux-amd64.tar.gz: one top directory
// with bin/, README.md, docs/ and deploy/ (manifests, chart, rules; not the
// Go tests of deploy/ nor their module files).
func writeTarball(o Options) (string, error) {
	top := "xpu-timer-" + o.Version + "-linux-amd64"
	name := filepath.Join(o.Out, top+".tar.gz")
	f, err := os.Create(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, o.gzipLevel())
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(gz)
	for _, b := range binaries {
		if err := addFile(tw, filepath.Join(o.Bin, b), top+"/bin/"+b, 0o755); err != nil {
			return "", err
		}
	}
	if err := addFile(tw, filepath.Join(o.Root, "README.md"), top+"/README.md", 0o644); err != nil {
		return "", err
	}
	for _, dir := range []string{"docs", "deploy"} {
		err := filepath.WalkDir(filepath.Join(o.Root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !shipped(p) {
				return err
			}
			rel, _ := filepath.Rel(o.Root, p)
			return addFile(tw, p, top+"/"+filepath.ToSlash(rel), 0o644)
		})
		if err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return name, f.Close()
}

// shipped tells whether a file of docs/ or deploy/ goes into the tarball:
// everything but Go sources and module files.
func shipped(p string) bool {
	base := filepath.Base(p)
	return !strings.HasSuffix(base, ".go") && base != "go.mod" && base != "go.sum"
}

// epoch is the modification time of every packaged file, so that the same
// inputs give the same archives.
var epoch = time.Unix(0, 0).UTC()

// addFile adds a regular file (following symlinks) owned by root.
func addFile(tw *tar.Writer, src, name string, mode int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: st.Size(), ModTime: epoch, Uname: "root", Gname: "root", Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
