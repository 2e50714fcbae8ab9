//go:build linux && amd64

package native

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// The stop helper's protocol (helper_linux.go), written by hand: the
// messages are few and flat, and encoding/gob, which did this before,
// cost every start of a one-shot dump binary its package initialisation
// (docs/measurements.md, "Figures from code comments"). Integers are varints, strings and byte slices
// length-prefixed; each message is flushed whole.

// maxWire bounds a length read from the wire (a stack, a string, a count):
// the peer is our own executable, but a broken pipe mid-message must not
// make us allocate what a garbled length says.
const maxWire = 1 << 30

// errWire is a message that does not decode.
var errWire = errors.New("malformed stop helper message")

// Message tags.
const (
	tagStopped byte = 's'
	tagResult  byte = 'r'
)

// wireWriter writes one message at a time.
type wireWriter struct {
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
}

func newWireWriter(w io.Writer) *wireWriter { return &wireWriter{w: bufio.NewWriter(w)} }

func (w *wireWriter) uint(v uint64) { w.w.Write(binary.AppendUvarint(w.buf[:0], v)) }

func (w *wireWriter) int(v int64) { w.w.Write(binary.AppendVarint(w.buf[:0], v)) }

func (w *wireWriter) bytes(b []byte) {
	w.uint(uint64(len(b)))
	w.w.Write(b)
}

func (w *wireWriter) string(s string) {
	w.uint(uint64(len(s)))
	w.w.WriteString(s)
}

// regs writes the registers as they lie in memory: both ends are this
// executable.
func (w *wireWriter) regs(r *unix.PtraceRegs) {
	w.w.Write(unsafe.Slice((*byte)(unsafe.Pointer(r)), unsafe.Sizeof(*r)))
}

func (w *wireWriter) flush() error { return w.w.Flush() }

// wireReader reads messages; its first error sticks, and every read after
// it returns zero.
type wireReader struct {
	r   *bufio.Reader
	err error
}

func (r *wireReader) fail(err error) {
	if r.err == nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		r.err = err
	}
}

// read reads one value with f, unless an earlier read failed (zero then).
func read[T any](r *wireReader, f func(io.ByteReader) (T, error)) T {
	var v T
	if r.err == nil {
		var err error
		v, err = f(r.r)
		r.fail(err)
	}
	return v
}

func (r *wireReader) uint() uint64 { return read(r, binary.ReadUvarint) }

func (r *wireReader) int() int64 { return read(r, binary.ReadVarint) }

func (r *wireReader) byte() byte { return read(r, io.ByteReader.ReadByte) }

// count reads a length, at most maxWire.
func (r *wireReader) count() int {
	n := r.uint()
	if n > maxWire {
		r.fail(fmt.Errorf("%w: length %d", errWire, n))
		return 0
	}
	return int(n)
}

func (r *wireReader) bytes() []byte {
	n := r.count()
	if r.err != nil || n == 0 {
		return nil
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r.r, b)
	r.fail(err)
	return b
}

func (r *wireReader) string() string { return string(r.bytes()) }

func (r *wireReader) regs(p *unix.PtraceRegs) {
	if r.err != nil {
		return
	}
	_, err := io.ReadFull(r.r, unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p)))
	r.fail(err)
}

// writeRequest sends a request.
func writeRequest(w *wireWriter, req *helperRequest) error {
	w.int(int64(req.PID))
	w.int(int64(req.MaxStop))
	w.int(int64(req.MaxStack))
	w.uint(uint64(len(req.Maps)))
	for _, m := range req.Maps {
		w.uint(m.Start)
		w.uint(m.End)
		w.string(m.Perms)
		w.uint(m.Offset)
		w.string(m.Dev)
		w.uint(m.Inode)
		w.string(m.Path)
	}
	w.int(int64(req.Stragglers))
	return w.flush()
}

// readRequest reads a request.
func readRequest(r *wireReader) (*helperRequest, error) {
	req := &helperRequest{PID: int(r.int()), MaxStop: time.Duration(r.int()), MaxStack: int(r.int())}
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		req.Maps = append(req.Maps, procfs.Mapping{Start: r.uint(), End: r.uint(), Perms: r.string(),
			Offset: r.uint(), Dev: r.string(), Inode: r.uint(), Path: r.string()})
	}
	req.Stragglers = time.Duration(r.int())
	return req, r.err
}

// writeStopped tells the dump that every thread is held.
func writeStopped(w *wireWriter) error {
	w.w.WriteByte(tagStopped)
	return w.flush()
}

// writeResult sends the copies.
func writeResult(w *wireWriter, res *helperResult) error {
	w.w.WriteByte(tagResult)
	w.int(int64(res.StoppedFor))
	partial := uint64(0)
	if res.Partial {
		partial = 1
	}
	w.uint(partial)
	w.uint(uint64(len(res.Threads)))
	for i := range res.Threads {
		t := &res.Threads[i]
		w.int(int64(t.TID))
		w.w.WriteByte(t.State)
		w.string(t.Name)
		w.regs(&t.Regs)
		w.uint(t.StackLo)
		w.bytes(t.Stack)
		w.string(t.Err)
		w.uint(uint64(t.Errno))
	}
	return w.flush()
}

// readMsg reads one message: Stopped, or a Result.
func readMsg(r *wireReader) (helperMsg, error) {
	switch tag := r.byte(); {
	case r.err != nil:
		return helperMsg{}, r.err
	case tag == tagStopped:
		return helperMsg{Stopped: true}, nil
	case tag != tagResult:
		return helperMsg{}, fmt.Errorf("%w: tag %#x", errWire, tag)
	}
	res := &helperResult{StoppedFor: time.Duration(r.int()), Partial: r.uint() == 1}
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		var t wireThread
		t.TID = int(r.int())
		t.State = r.byte()
		t.Name = r.string()
		r.regs(&t.Regs)
		t.StackLo = r.uint()
		t.Stack = r.bytes()
		t.Err = r.string()
		t.Errno = unix.Errno(r.uint())
		res.Threads = append(res.Threads, t)
	}
	if r.err != nil {
		return helperMsg{}, r.err
	}
	return helperMsg{Result: res}, nil
}
