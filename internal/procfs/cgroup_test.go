package procfs

import (
	"os"
	"strings"
	"testing"
)

const (
	uid  = "1f3c9a8e-2b7d-4e61-9c0a-5d8e7f6a4b21"
	uidU = "1f3c9a8e_2b7d_4e61_9c0a_5d8e7f6a4b21"
	cid  = "4c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d"
)

func TestParseCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		pod, cont string
		kubepods  bool
		path      string
	}{
		{name: "v2 systemd containerd",
			in:  "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			pod: uid, cont: cid, kubepods: true},
		{name: "v2 systemd guaranteed crio",
			in:  "0::/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + cid + ".scope\n",
			pod: uid, cont: cid, kubepods: true},
		{name: "v2 cgroupfs",
			in:  "0::/kubepods/besteffort/pod" + uid + "/" + cid + "\n",
			pod: uid, cont: cid, kubepods: true},
		{name: "v2 seen from another container's cgroup namespace",
			in:  "0::/../../kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			pod: uid, cont: cid, kubepods: true},
		{name: "v1 hierarchies, pod in every one",
			in: "12:pids:/kubepods/burstable/pod" + uid + "/" + cid + "\n" +
				"11:memory:/kubepods/burstable/pod" + uid + "/" + cid + "\n1:name=systemd:/kubepods/burstable/pod" + uid + "/" + cid + "\n",
			pod: uid, cont: cid, kubepods: true},
		{name: "hybrid: empty v2, pod in v1",
			in:  "1:cpu:/kubepods/pod" + uid + "/" + cid + "\n0::/\n",
			pod: uid, cont: cid, kubepods: true, path: "/kubepods/pod" + uid + "/" + cid},
		{name: "static pod hash", in: "0::/kubepods/burstable/pod0123456789abcdef0123456789ABCDEF/" + cid + "\n",
			pod: "0123456789abcdef0123456789abcdef", cont: cid, kubepods: true},
		{name: "pod sandbox (pause) or pod-level process", in: "0::/kubepods/burstable/pod" + uid + "\n", pod: uid, kubepods: true},
		{name: "docker outside Kubernetes", in: "0::/system.slice/docker-" + cid + ".scope\n", cont: cid},
		{name: "host process", in: "0::/user.slice/user-0.slice/session-3.scope\n"},
		{name: "root", in: "0::/\n"},
		{name: "this machine's hybrid", in: "9:name=systemd:/\n4:memory:/process_api/e2c541a72634cdbbe934b6b69539fb46\n0::/\n", path: "/"},
		{name: "podman is no pod", in: "0::/user.slice/podman-1234.scope\n"},
		{name: "bad uid", in: "0::/kubepods/burstable/pod1f3c9a8e-2b7d-4e61-9c0a-5d8e7f6a4bzz/x\n", kubepods: true},
		{name: "uid dashes misplaced", in: "0::/kubepods/pod1f3c9a8e2-b7d-4e61-9c0a-5d8e7f6a4b21/x\n", kubepods: true},
		{name: "garbage", in: "\x00\xff::\n:::\n0:\nno colon\n3:cpu:relative/pod" + uid + "\n"},
		{name: "empty", in: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ParseCgroup([]byte(tc.in))
			if c.PodUID != tc.pod || c.ContainerID != tc.cont || c.Kubepods != tc.kubepods {
				t.Errorf("ParseCgroup = %+v; want pod %q container %q kubepods %v", c, tc.pod, tc.cont, tc.kubepods)
			}
			if tc.path != "" && c.Path != tc.path {
				t.Errorf("path %q, want %q", c.Path, tc.path)
			}
		})
	}
}

func TestReadCgroupSelf(t *testing.T) {
	c, err := ReadCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Path, "/") {
		t.Errorf("own cgroup %+v: no path", c)
	}
	if _, err := ReadCgroup(1 << 30); err == nil {
		t.Error("a process that does not exist has a cgroup")
	}
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n"))
	f.Add([]byte("12:pids:/kubepods/burstable/pod" + uid + "/" + cid + "\n0::/\n"))
	f.Add([]byte("0::/../pod/pod-pod.slice/.scope\n:\n::\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := ParseCgroup(b)
		if c.PodUID != "" {
			if n := len(c.PodUID); n != 32 && n != 36 || c.PodUID != strings.ToLower(c.PodUID) || strings.Contains(c.PodUID, "_") {
				t.Fatalf("pod UID %q", c.PodUID)
			}
			if !strings.Contains(c.Path, "pod") {
				t.Fatalf("pod UID %q from path %q", c.PodUID, c.Path)
			}
		}
		if c.ContainerID != "" && (len(c.ContainerID) != 64 || !isHex(c.ContainerID)) {
			t.Fatalf("container ID %q", c.ContainerID)
		}
		if c.Path != "" && (c.Path[0] != '/' || strings.ContainsAny(c.Path, "\n")) {
			t.Fatalf("path %q", c.Path)
		}
	})
}
