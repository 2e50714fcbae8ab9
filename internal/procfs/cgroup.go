package procfs

import (
	"bytes"
	"strings"
)

// Cgroup is what /proc/PID/cgroup tells of the container a process runs
// in. Kubernetes names a pod's cgroup after the pod's UID, never after its
// name or namespace: those are not here.
type Cgroup struct {
	// Path is the cgroup v2 path (the "0::" line), else the first v1 path
	// that names a pod, else the first v1 path. It is relative to the
	// reader's cgroup namespace: "/../.." prefixes are normal for a reader
	// in a container.
	Path string
	// PodUID is the pod's UID, lower case with dashes
	// ("1f3c9a8e-2b7d-4e61-9c0a-5d8e7f6a4b21"), or the 32 hex digits of a
	// static pod's config hash; "" when the path names no pod.
	PodUID string
	// ContainerID is the 64 hex digits of the container's ID, without the
	// runtime's prefix (cri-containerd-, crio-, docker-); "" when none.
	ContainerID string
	// Kubepods is true when the path runs through a kubelet's kubepods
	// cgroup (both the cgroupfs and the systemd driver's spelling).
	Kubepods bool
}

// ReadCgroup reads and parses /proc/PID/cgroup.
func ReadCgroup(pid int) (Cgroup, error) {
	b, err := read(path(pid, "cgroup"))
	if err != nil {
		return Cgroup{}, err
	}
	return ParseCgroup(b), nil
}

// ParseCgroup parses the text of a cgroup file: "ID:CONTROLLERS:PATH"
// lines, cgroup v2 as "0::PATH". Lines it cannot read are skipped: the
// result is what could be learnt, the zero Cgroup when nothing.
func ParseCgroup(b []byte) Cgroup {
	var v2, firstPod, first string
	for line := range bytes.Lines(b) {
		line = bytes.TrimRight(line, "\r\n")
		id, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(id) == 0 {
			continue
		}
		ctl, p, ok := bytes.Cut(rest, []byte(":"))
		if !ok || len(p) == 0 || p[0] != '/' {
			continue
		}
		s := string(p)
		switch {
		case string(id) == "0" && len(ctl) == 0:
			if v2 == "" {
				v2 = s
			}
		case firstPod == "" && podOf(s) != "":
			firstPod = s
		case first == "":
			first = s
		}
	}
	c := Cgroup{Path: first}
	switch {
	case v2 != "" && (podOf(v2) != "" || firstPod == ""):
		c.Path = v2
	case firstPod != "":
		c.Path = firstPod
	}
	c.PodUID = podOf(c.Path)
	c.ContainerID = containerOf(c.Path)
	c.Kubepods = strings.Contains(c.Path, "/kubepods")
	return c
}

// podOf finds the pod UID in a cgroup path: a segment "pod<UID>" (the
// cgroupfs driver: /kubepods/burstable/pod<UID>/<ID>) or
// "kubepods-<qos>-pod<UID>.slice" (the systemd driver, the UID's dashes
// written as underscores). The innermost such segment wins.
func podOf(p string) string {
	segs := strings.Split(p, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		s := strings.TrimSuffix(segs[i], ".slice")
		j := strings.LastIndex(s, "pod")
		if j < 0 || j > 0 && s[j-1] != '-' {
			continue
		}
		if uid, ok := NormalPodUID(s[j+len("pod"):]); ok {
			return uid
		}
	}
	return ""
}

// NormalPodUID checks a pod UID as the API or a cgroup path writes it (36
// characters with dashes or underscores at 8, 13, 18, 23; or 32 hex
// digits, a static pod's hash) and returns it lower case with dashes.
func NormalPodUID(s string) (string, bool) {
	switch len(s) {
	case 32:
		if !isHex(s) {
			return "", false
		}
		return strings.ToLower(s), true
	case 36:
		b := []byte(strings.ToLower(s))
		for i, c := range b {
			switch i {
			case 8, 13, 18, 23:
				if c != '-' && c != '_' {
					return "", false
				}
				b[i] = '-'
			default:
				if !isHexByte(c) {
					return "", false
				}
			}
		}
		return string(b), true
	}
	return "", false
}

// containerPrefixes are what container runtimes put before the container's
// ID in the name of its cgroup (systemd driver: "<prefix><ID>.scope").
var containerPrefixes = []string{"cri-containerd-", "crio-", "docker-", "containerd-", "libpod-"}

// containerOf finds the container ID in the innermost segment of a cgroup
// path: 64 hex digits, bare (cgroupfs driver) or as "<runtime>-<ID>.scope".
func containerOf(p string) string {
	last := p[strings.LastIndexByte(p, '/')+1:]
	last = strings.TrimSuffix(last, ".scope")
	for _, pre := range containerPrefixes {
		if rest, ok := strings.CutPrefix(last, pre); ok {
			last = rest
			break
		}
	}
	if len(last) == 64 && isHex(last) {
		return strings.ToLower(last)
	}
	return ""
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func isHexByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
