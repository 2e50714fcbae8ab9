package procfs

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestParseMaps(t *testing.T) {
	in := []byte("7f0000001000-7f0000002000 r-xp 00001000 fd:01 1234   /usr/lib/my lib.so (deleted)\n" +
		"7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0                          [vdso]\n" +
		"00400000-00401000 rw-p 00000000 00:00 0 \n")
	ms, err := ParseMaps(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Start != 0x400000 || ms[0].Path != "" || ms[0].Exec() {
		t.Fatalf("anon mapping: %+v", ms)
	}
	if ms[1].Path != "/usr/lib/my lib.so" || ms[1].Offset != 0x1000 || ms[1].Inode != 1234 || !ms[1].Exec() || !ms[1].Contains(0x7f0000001fff) || ms[1].Contains(0x7f0000002000) {
		t.Fatalf("file mapping: %+v", ms[1])
	}
	if ms[2].Path != "[vdso]" {
		t.Fatalf("vdso: %+v", ms[2])
	}
	if _, err := ParseMaps([]byte("garbage\n")); err == nil {
		t.Fatal("want error on garbage")
	}
}

func TestParseStat(t *testing.T) {
	s, err := ParseStat([]byte("42 (a (b) c) D 1 40 40 0 -1 4194560 0 0"))
	if err != nil {
		t.Fatal(err)
	}
	if s.PID != 42 || s.Comm != "a (b) c" || s.State != 'D' || s.PPID != 1 || s.PGID != 40 {
		t.Fatalf("%+v", s)
	}
	if StateName(s.State) != "D (disk sleep)" {
		t.Fatal(StateName(s.State))
	}
	for _, bad := range []string{"", "1 (x", "x (y) S 1 2 3", "1 (y) S"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q): want error", bad)
		}
	}
}

func TestSelfAndChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "RANK=3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	// Start returns once the exec closed our pipe, which the kernel does
	// before it lays out the new image's environment: it may read empty
	// for a moment.
	env, err := Environ(pid)
	for deadline := time.Now().Add(2 * time.Second); err == nil && len(env) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		env, err = Environ(pid)
	}
	if err != nil || env["RANK"] != "3" {
		t.Fatalf("environ: %v %v", env["RANK"], err)
	}
	kids, err := Children(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range kids {
		found = found || k == pid
	}
	if !found {
		t.Fatalf("children of self %v lack %d", kids, pid)
	}
	tids, err := Tasks(os.Getpid())
	if err != nil || len(tids) == 0 {
		t.Fatalf("tasks: %v %v", tids, err)
	}
	ms, err := Maps(pid)
	if err != nil || len(ms) == 0 {
		t.Fatalf("maps: %v", err)
	}
	if _, err := ReadStat(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("missing pid: %v", err)
	}
}

func TestExeAndRunsPython(t *testing.T) {
	exe, err := Exe(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self, _ := os.Executable(); exe != self {
		t.Fatalf("Exe(self) = %q, want %q", exe, self)
	}
	for path, want := range map[string]bool{"/usr/bin/python3.11": true, "/opt/py/bin/python3.14t": true, "/usr/bin/bash": false, "/home/python/bin/ls": false, "": false} {
		if got := RunsPython(path); got != want {
			t.Errorf("RunsPython(%q) = %v, want %v", path, got, want)
		}
	}
}
