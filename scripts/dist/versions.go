package main

import (
	"debug/elf"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// describeRe parses `git describe --tags --dirty`: v1.2.3, v1.2.3-4-gabcdef,
// either with -dirty.
var describeRe = regexp.MustCompile(`^v?(\d+\.\d+\.\d+)(?:-(\d+)-g([0-9a-f]+))?(-dirty)?$`)

// pep440 spells a version for a wheel: 1.2.3, 1.2.3.post4+gabcdef,
// 1.2.3+dirty; anything else (dev, before the first tag) is 0.0.0.dev0.
func pep440(v string) string {
	m := describeRe.FindStringSubmatch(v)
	if m == nil {
		return "0.0.0.dev0"
	}
	out, local := m[1], []string{}
	if m[2] != "" {
		out += ".post" + m[2]
		local = append(local, "g"+m[3])
	}
	if m[4] != "" {
		local = append(local, "dirty")
	}
	if len(local) > 0 {
		out += "+" + strings.Join(local, ".")
	}
	return out
}

// debVersion spells a version for dpkg: 1.2.3, 1.2.3+git4.gabcdef,
// 1.2.3+dirty; before the first tag 0.0.0~dev (lower than any release).
func debVersion(v string) string {
	m := describeRe.FindStringSubmatch(v)
	if m == nil {
		return "0.0.0~dev"
	}
	out := m[1]
	if m[2] != "" {
		out += "+git" + m[2] + ".g" + m[3]
	}
	if m[4] != "" {
		out += "+dirty"
	}
	return out
}

// glibcNeeded is the newest GLIBC_x.y symbol version the binaries need:
// the wheel's manylinux tag and the .deb's libc6 dependency. A static
// binary (no dynamic section: xpu-timer-dump and the viewer, built with
// netgo,osusergo) needs none.
func glibcNeeded(paths []string) (major, minor int, err error) {
	for _, p := range paths {
		f, err := elf.Open(p)
		if err != nil {
			return 0, 0, err
		}
		if f.SectionByType(elf.SHT_DYNAMIC) == nil {
			f.Close()
			continue
		}
		syms, err := f.DynamicSymbols()
		f.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("%s: dynamic symbols: %w", p, err)
		}
		for _, s := range syms {
			v, ok := strings.CutPrefix(s.Version, "GLIBC_")
			if !ok {
				continue
			}
			a, b, _ := strings.Cut(v, ".")
			x, err1 := strconv.Atoi(a)
			y, err2 := strconv.Atoi(strings.SplitN(b, ".", 2)[0])
			if err1 != nil || err2 != nil {
				continue
			}
			if x > major || x == major && y > minor {
				major, minor = x, y
			}
		}
	}
	if major == 0 {
		return 2, 17, nil // linked against no versioned glibc symbol: the manylinux2014 baseline
	}
	return major, minor, nil
}
