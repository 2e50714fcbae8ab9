package python

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

const (
	maxInterpreters = 256
	maxThreads      = 1 << 14
	maxFrames       = 1 << 14
)

// validPtr reports whether p can be a heap or data pointer of an x86-64
// user process.
func validPtr(p uint64) bool { return p >= 0x1000 && p < 1<<47 && p%8 == 0 }

func (r *Reader) read(addr uint64, n int64) ([]byte, error) {
	if !validPtr(addr) {
		return nil, fmt.Errorf("pointer %#x: %w", addr, errInconsistent)
	}
	b := make([]byte, n)
	return b, r.mem.read(addr, b)
}

func (r *Reader) ptr(addr uint64) (uint64, error) {
	b, err := r.read(addr, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func word(b []byte, off int64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

func threadSize(l layout) int64 {
	return max(l.tsNext, l.tsInterp, l.tsThreadID, l.tsNativeID, l.tsFrame, l.tsCFrame) + 8
}

// threads walks interpreters and their thread states once.
func (r *Reader) threads() ([]Thread, error) {
	l := r.l
	interp, err := r.ptr(r.runtime + uint64(l.runtimeInterpHead))
	if err != nil {
		return nil, err
	}
	var holder uint64
	if l.runtimeGILHolder != none {
		if holder, err = r.gilHolder(r.runtime+uint64(l.runtimeGILHolder), r.runtime+uint64(l.runtimeGILLocked)); err != nil {
			return nil, err
		}
	}
	var out []Thread
	seen := map[uint64]bool{}
	for n := 0; interp != 0; n++ {
		if n >= maxInterpreters || seen[interp] {
			return nil, fmt.Errorf("interpreter list: %w", errInconsistent)
		}
		seen[interp] = true
		switch {
		case l.interpGILPtr != none:
			gil, err := r.ptr(interp + uint64(l.interpGILPtr))
			if err != nil {
				return nil, err
			}
			if gil != 0 {
				if holder, err = r.gilHolder(gil+uint64(l.gilHolder), gil+uint64(l.gilLocked)); err != nil {
					return nil, err
				}
			}
		case l.interpGILHolder != none:
			if holder, err = r.gilHolder(interp+uint64(l.interpGILHolder), interp+uint64(l.interpGILLocked)); err != nil {
				return nil, err
			}
		}
		ts, err := r.ptr(interp + uint64(l.interpThreads))
		if err != nil {
			return nil, err
		}
		for ts != 0 {
			if len(out) >= maxThreads || seen[ts] {
				return nil, fmt.Errorf("thread list: %w", errInconsistent)
			}
			seen[ts] = true
			b, err := r.read(ts, threadSize(l))
			if err != nil {
				return nil, err
			}
			if word(b, l.tsInterp) != interp {
				return nil, fmt.Errorf("thread state %#x of another interpreter: %w", ts, errInconsistent)
			}
			t := Thread{Ident: word(b, l.tsThreadID), GIL: holder == ts}
			if l.tsNativeID != none {
				t.TID = int(word(b, l.tsNativeID))
			}
			t.Frames, t.codes, err = r.stack(ts, b)
			if errors.Is(err, procfs.ErrNoProcess) {
				return nil, err
			}
			if err != nil {
				t.Error = err.Error()
			}
			out = append(out, t)
			ts = word(b, l.tsNext)
		}
		if interp, err = r.ptr(interp + uint64(l.interpNext)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// gilHolder returns the thread state holding the GIL, or 0 when unlocked.
func (r *Reader) gilHolder(holderAddr, lockedAddr uint64) (uint64, error) {
	holder, err := r.ptr(holderAddr)
	if err != nil {
		return 0, err
	}
	b := make([]byte, 4)
	if err := r.mem.read(lockedAddr, b); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(b) == 0 {
		return 0, nil
	}
	return holder, nil
}

// stack reads the frames of one thread state, retrying a walk that tears.
func (r *Reader) stack(ts uint64, tsb []byte) ([]stack.Frame, []frameCode, error) {
	var frames []stack.Frame
	var codes []frameCode
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			if tsb, err = r.read(ts, threadSize(r.l)); err != nil {
				return nil, nil, err
			}
		}
		if r.l.minor <= 10 {
			frames, codes, err = r.frameObjects(word(tsb, r.l.tsFrame))
		} else {
			var top uint64
			if r.l.tsCFrame != none {
				cf := word(tsb, r.l.tsCFrame)
				if cf != 0 {
					if top, err = r.ptr(cf + uint64(r.l.cfCurrent)); err != nil {
						return nil, nil, err
					}
				}
			} else {
				top = word(tsb, r.l.tsFrame)
			}
			frames, codes, err = r.interpreterFrames(top)
		}
		if err == nil || !errors.Is(err, errInconsistent) {
			break
		}
	}
	if n := len(frames); n > 0 {
		frames[n-1].Entry = true // the outermost frame always began an evaluation
	}
	return frames, codes, err
}

// frameObjects walks a PyFrameObject chain (3.9, 3.10): each frame is run
// by its own evaluation-loop call, so every frame is an entry.
func (r *Reader) frameObjects(f uint64) ([]stack.Frame, []frameCode, error) {
	l := r.l
	var out []stack.Frame
	var codes []frameCode
	seen := map[uint64]bool{}
	for f != 0 {
		if len(out) >= maxFrames || seen[f] {
			return out, codes, fmt.Errorf("frame chain: %w", errInconsistent)
		}
		seen[f] = true
		b, err := r.read(f, l.frameLasti+4)
		if err != nil {
			return out, codes, err
		}
		if t := r.types["PyFrame_Type"]; t != 0 && word(b, l.objectType) != t {
			return out, codes, fmt.Errorf("frame %#x is no frame object: %w", f, errInconsistent)
		}
		code := word(b, l.frameCode)
		ci, err := r.codeHeader(code)
		if err != nil {
			return out, codes, err
		}
		lasti := int(int32(binary.LittleEndian.Uint32(b[l.frameLasti:])))
		fc := frameCode{addr: code, ci: ci, at: lasti, line: lineLnotab}
		if l.minor != 9 {
			fc.at, fc.line = max(lasti, -1)*2, lineTable310
		}
		out = append(out, stack.Frame{Module: "python", Entry: true})
		codes = append(codes, fc)
		f = word(b, l.frameBack)
	}
	return out, codes, nil
}

// interpreterFrames walks a _PyInterpreterFrame chain (3.11+). One
// evaluation-loop call runs several frames; the outermost frame of each
// call is marked Entry: is_entry on 3.11, the frame just inside an entry
// shim on 3.12+ (the shims themselves, and 3.15's base frame, are
// skipped).
func (r *Reader) interpreterFrames(f uint64) ([]stack.Frame, []frameCode, error) {
	l := r.l
	size := max(l.iframeCode, l.iframePrevious, l.iframeInstr, l.iframeOwner, l.iframeIsEntry) + 8
	var out []stack.Frame
	var codes []frameCode
	seen := map[uint64]bool{}
	for f != 0 {
		if len(out) >= maxFrames || seen[f] {
			return out, codes, fmt.Errorf("frame chain: %w", errInconsistent)
		}
		seen[f] = true
		b, err := r.read(f, size)
		if err != nil {
			return out, codes, err
		}
		prev := word(b, l.iframePrevious)
		if l.minor >= 12 && b[l.iframeOwner] >= firstShimOwner {
			if n := len(out); n > 0 {
				out[n-1].Entry = true
			}
			f = prev
			continue
		}
		code := word(b, l.iframeCode)
		if l.stackRef {
			code &^= stackRefTags
		}
		// Only the shims skipped above run no code object (their
		// f_executable is None): anything else is torn memory.
		ci, err := r.codeHeader(code)
		if err != nil {
			return out, codes, err
		}
		// prev_instr / instr_ptr, relative to the first instruction; -2
		// (prev_instr of a frame not started) reads as the first line.
		off := int64(word(b, l.iframeInstr) - (code + uint64(l.codeCodeAdaptive)))
		if off < -2 || off > 1<<26 {
			return out, codes, fmt.Errorf("instruction pointer %#x outside code %#x: %w", word(b, l.iframeInstr), code, errInconsistent)
		}
		fr := stack.Frame{Module: "python"}
		if l.iframeIsEntry != none && b[l.iframeIsEntry] != 0 {
			fr.Entry = true
		}
		out = append(out, fr)
		codes = append(codes, frameCode{addr: code, ci: ci, at: int(off), line: lineTable311})
		f = prev
	}
	return out, codes, nil
}

// frameCode is what names a frame that a walk read: its code object and
// where in it the frame is, for its line table (line).
type frameCode struct {
	addr uint64
	ci   *codeInfo
	at   int
	line func(table []byte, first, at int) int
}

// finish decodes the code objects of the frames that threads read, once
// the target goes on, and names each frame: its function, file and line.
// A code object that cannot be read (freed meanwhile) cuts its thread's
// frames there, as a torn walk does.
func (r *Reader) finish(t *Thread) {
	for i, fc := range t.codes {
		if err := r.decode(fc.addr, fc.ci); err != nil {
			t.Frames = t.Frames[:i]
			if t.Error == "" {
				t.Error = err.Error()
			}
			break
		}
		t.Frames[i].Func, t.Frames[i].File = fc.ci.name, fc.ci.file
		t.Frames[i].Line = fc.line(fc.ci.table, fc.ci.first, fc.at)
	}
	t.codes = nil
}

// nameThreads fills TID (3.9/3.10: from the pthread struct) and Name.
func (r *Reader) nameThreads(ts []Thread) error {
	tids, err := procfs.Tasks(r.pid)
	if err != nil {
		return err
	}
	live := map[int]bool{}
	for _, t := range tids {
		live[t] = true
	}
	if r.l.tsNativeID == none {
		r.pthreadTIDs(ts, live)
	}
	for i := range ts {
		if !live[ts[i].TID] {
			ts[i].TID = 0
			continue
		}
		ts[i].Name, _ = procfs.ThreadName(r.pid, ts[i].TID)
	}
	return nil
}

// pthreadStructSize bounds the search for the tid field of glibc's struct
// pthread, whose address is the pthread_t a thread state records.
const pthreadStructSize = 0x800

// glibcTIDOffset is where x86-64 glibc keeps struct pthread's tid; it is
// tried first and kept when it names live threads.
const glibcTIDOffset = 0x2d0

// pthreadTIDs maps each thread's pthread_t to its kernel thread id by
// reading the tid field of struct pthread. The field's offset is found
// once: the offset at which the most thread states hold distinct live
// thread ids, glibc's usual 0x2d0 preferred.
func (r *Reader) pthreadTIDs(ts []Thread, live map[int]bool) {
	if r.tidOff != 0 {
		b := make([]byte, 4)
		for i := range ts {
			if validPtr(ts[i].Ident) && r.mem.read(ts[i].Ident+uint64(r.tidOff), b) == nil {
				ts[i].TID = int(int32(binary.LittleEndian.Uint32(b)))
			}
		}
		return
	}
	blocks := make([][]byte, len(ts))
	for i, t := range ts {
		b, err := r.read(t.Ident, pthreadStructSize)
		if err == nil {
			blocks[i] = b
		}
	}
	score := func(off int64) int {
		n, used := 0, map[int]bool{}
		for _, b := range blocks {
			if b == nil {
				continue
			}
			tid := int(int32(binary.LittleEndian.Uint32(b[off:])))
			if tid > 0 && live[tid] && !used[tid] {
				used[tid] = true
				n++
			}
		}
		return n
	}
	best, bestScore := int64(glibcTIDOffset), score(glibcTIDOffset)
	for off := int64(0); off+4 <= pthreadStructSize; off += 4 {
		if s := score(off); s > bestScore {
			best, bestScore = off, s
		}
	}
	if bestScore == 0 {
		return
	}
	read := 0
	for i, b := range blocks {
		if b != nil {
			read++
			ts[i].TID = int(int32(binary.LittleEndian.Uint32(b[best:])))
		}
	}
	if 2*bestScore > read {
		r.tidOff = best // most threads agree: keep it for later calls
	}
}
