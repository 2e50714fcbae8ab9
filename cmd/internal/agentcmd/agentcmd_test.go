package agentcmd

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/ranks"
)

func TestMapsVendor(t *testing.T) {
	maps := func(paths ...string) []procfs.Mapping {
		var ms []procfs.Mapping
		for _, p := range paths {
			ms = append(ms, procfs.Mapping{Path: p, Perms: "r-xp"})
		}
		return ms
	}
	for _, tc := range []struct {
		maps []procfs.Mapping
		libs []string
		want bool
	}{
		{maps("/usr/bin/python3", "/lib/libc.so.6"), nil, false},
		{maps("/usr/bin/python3", "/site-packages/nvidia/nccl/lib/libnccl.so.2"), nil, true},
		{maps("/opt/cuda/lib64/libcudart.so.12.4.127"), nil, true},
		{maps("/usr/lib/x86_64-linux-gnu/libcuda.so.1"), nil, true},
		{maps("/opt/maca/lib/libmcruntime.so.2"), nil, true},
		{maps("/opt/maca/lib/libmccl.so"), nil, true},
		{maps("/opt/vendor/librenamed_rt.so"), []string{"/opt/vendor/librenamed_rt.so"}, true},
		{maps("/elsewhere/librenamed_rt.so"), []string{"/opt/vendor/librenamed_rt.so"}, true},
		{maps("[vdso]", "libnccl.so.2"), nil, false}, // not a file path
	} {
		if got := MapsVendor(tc.maps, tc.libs); got != tc.want {
			t.Errorf("MapsVendor(%v, %v) = %v, want %v", tc.maps, tc.libs, got, tc.want)
		}
	}
}

// A process with RANK that maps a library named by --libraries is found;
// one without RANK is not.
func TestScanFindsRankedProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	with := exec.Command(sleep, "30")
	with.Env = []string{"RANK=0"}
	without := exec.Command(sleep, "30")
	without.Env = []string{"PATH=/bin"}
	for _, c := range []*exec.Cmd{with, without} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func(c *exec.Cmd) { c.Process.Kill(); c.Wait() }(c)
	}
	// sleep maps the C library; name it as a vendor library.
	var lib string
	wmaps, err := procfs.Maps(with.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range wmaps {
		if m.Exec() && m.Path != "" && m.Path[0] == '/' && m.Path != sleep {
			lib = m.Path
			break
		}
	}
	if lib == "" {
		t.Fatal("sleep maps no shared library")
	}
	found, _ := Finder{Libraries: []string{lib}}.Scan()
	if !slices.Contains(found, with.Process.Pid) || slices.Contains(found, without.Process.Pid) {
		t.Fatalf("Scan = %v; want %d and not %d", found, with.Process.Pid, without.Process.Pid)
	}
}

// The scope leaves out training processes of another namespace, or of none
// named, and of another command, with the reason; the rest are found.
func TestScanScope(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	start := func(arg string, env ...string) int {
		c := exec.Command(sleep, arg)
		c.Env = append([]string{"RANK=0"}, env...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		// The kernel lays out a new process's environment after Start
		// returns: wait for it (and for the exec) before scanning.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			e, _ := procfs.Environ(c.Process.Pid)
			cl, _ := procfs.Cmdline(c.Process.Pid)
			if e["RANK"] == "0" && len(cl) == 2 {
				break
			}
		}
		return c.Process.Pid
	}
	train := start("31", "POD_NAMESPACE=train")
	other := start("32", "POD_NAMESPACE=other")
	none := start("33")
	wrongCmd := start("34", "POD_NAMESPACE=train")
	// The dynamic loader: the kernel maps it at exec, where ld.so maps
	// libc a little later, maybe after the scan.
	var lib string
	ms, err := procfs.Maps(train)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Exec() && strings.HasPrefix(filepath.Base(m.Path), "ld-linux") {
			lib = m.Path
			break
		}
	}
	if lib == "" {
		t.Fatalf("%s maps no ld-linux: %v", sleep, ms)
	}
	f := Finder{Libraries: []string{lib}, Scope: &ranks.Scope{Namespaces: []string{"train"}, Command: regexp.MustCompile(`^\S*sleep 3[123]$`)}}
	found, out := f.Scan()
	if !slices.Contains(found, train) {
		t.Errorf("found %v, want %d", found, train)
	}
	for pid, want := range map[int]string{other: `namespace "other"`, none: "names no namespace", wrongCmd: "does not match"} {
		if slices.Contains(found, pid) || !strings.Contains(out[pid], want) {
			t.Errorf("pid %d: found %v, left out because %q; want %q", pid, slices.Contains(found, pid), out[pid], want)
		}
	}
}
