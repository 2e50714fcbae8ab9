//go:build linux && amd64

package native

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// TestWireRoundTrip sends a request, a stop notice and a result through
// the stop helper's protocol and reads back what was sent.
func TestWireRoundTrip(t *testing.T) {
	req := helperRequest{PID: 4242, MaxStop: 250 * time.Millisecond, MaxStack: 1 << 20, Maps: []procfs.Mapping{
		{Start: 0x400000, End: 0x401000, Perms: "r-xp", Offset: 0x1000, Dev: "fd:01", Inode: 77, Path: "/usr/bin/python3.11"},
		{Start: 0x7ffd0000, End: 0x7ffe0000, Perms: "rw-p", Path: "[stack]"},
		{},
	}, Stragglers: 90 * time.Millisecond}
	regs := unix.PtraceRegs{Rip: 0x401234, Rsp: 0x7ffd1000, Rbp: 0x7ffd1010, R15: 1<<64 - 1, Orig_rax: 230}
	res := helperResult{StoppedFor: 1400 * time.Microsecond, Partial: true, Threads: []wireThread{
		{TID: 4242, State: 'S', Name: "python3", Regs: regs, StackLo: 0x7ffd0ff0, Stack: bytes.Repeat([]byte{1, 2, 3}, 5000)},
		{TID: 4243, State: 'R', Name: "", Err: "copy stack: operation not permitted", Errno: unix.EPERM},
	}}
	var buf bytes.Buffer
	w := newWireWriter(&buf)
	if err := writeRequest(w, &req); err != nil {
		t.Fatal(err)
	}
	if err := writeStopped(w); err != nil {
		t.Fatal(err)
	}
	if err := writeResult(w, &res); err != nil {
		t.Fatal(err)
	}
	r := &wireReader{r: bufio.NewReader(&buf)}
	got, err := readRequest(r)
	if err != nil || !reflect.DeepEqual(*got, req) {
		t.Fatalf("request: %v\n got %+v\nwant %+v", err, got, req)
	}
	if m, err := readMsg(r); err != nil || !m.Stopped || m.Result != nil {
		t.Fatalf("stop notice: %+v, %v", m, err)
	}
	m, err := readMsg(r)
	if err != nil || m.Stopped || m.Result == nil || !reflect.DeepEqual(*m.Result, res) {
		t.Fatalf("result: %v\n got %+v\nwant %+v", err, m.Result, res)
	}
	if _, err := readMsg(r); err != io.ErrUnexpectedEOF {
		t.Errorf("read past the end: %v, want %v", err, io.ErrUnexpectedEOF)
	}
}

// TestWireBroken reads every cut of a result, and garbled lengths: each
// is an error, never a panic or a huge allocation.
func TestWireBroken(t *testing.T) {
	var buf bytes.Buffer
	w := newWireWriter(&buf)
	writeResult(w, &helperResult{Threads: []wireThread{{TID: 1, Name: "x", Stack: []byte{1, 2, 3, 4}, Err: "e"}}})
	whole := buf.Bytes()
	for n := 0; n < len(whole); n++ {
		if _, err := readMsg(&wireReader{r: bufio.NewReader(bytes.NewReader(whole[:n]))}); err == nil {
			t.Errorf("a result cut at %d of %d bytes decoded", n, len(whole))
		}
	}
	for _, b := range [][]byte{
		{'x'}, // no such message
		{tagResult, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},                // 2^64-1 threads
		append([]byte{tagResult, 0, 0, 1, 2, 'S', 0xff, 0xff, 0xff, 0xff, 0x0f}, make([]byte, 8)...), // a 4 GiB name
	} {
		if _, err := readMsg(&wireReader{r: bufio.NewReader(bytes.NewReader(b))}); !errors.Is(err, errWire) {
			t.Errorf("% x: %v, want %v", b, err, errWire)
		}
	}
}
