package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"reflect"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// Real libraries: libc always; Debian's stripped libtorch_cpu.so (a 9.9 MB
// .eh_frame) when python3-torch is installed.
var ehLibs = []string{
	"/usr/lib/x86_64-linux-gnu/libc.so.6",
	"/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0",
}

// Lookups through .eh_frame_hdr find, for the start, the middle and the
// last byte of every function, the FDE a parse of the whole .eh_frame
// finds, with the same CIE; and none between functions. Both ways of
// holding .eh_frame are checked: read whole, and read an entry at a time.
func TestEhIndexMatchesFullParse(t *testing.T) {
	tested := 0
	for i, path := range ehLibs {
		if _, err := os.Stat(path); i > 0 && err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s := f.Section(".eh_frame")
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		all, err := ParseCFI(data, f.ByteOrder, s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		opens := 0
		open := func() (io.ReaderAt, io.Closer, error) {
			opens++
			return fileOpener(path)()
		}
		for _, whole := range []bool{true, false} {
			var held []byte
			if whole {
				held = data
			}
			ix, err := newEhIndex(f, held, open)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if n := len(ix.table) / 8; n != len(all) {
				t.Errorf("%s: search table has %d entries, .eh_frame %d FDEs", path, n, len(all))
			}
			step := 1 + len(all)/5000 // libtorch: every 44th function
			for j := 0; j < len(all); j += step {
				want := all[j]
				for _, pc := range []uint64{want.Begin(), want.Begin() + (want.End()-want.Begin())/2, want.End() - 1} {
					if want.End() == want.Begin() {
						continue
					}
					got, err := ix.lookup(pc)
					if err != nil {
						t.Fatalf("%s: lookup %#x: %v", path, pc, err)
					}
					sameFDE(t, pc, got, want)
				}
				if j+1 < len(all) && want.End() < all[j+1].Begin() {
					if _, err := ix.lookup(want.End()); !errors.Is(err, ErrNoFDE) {
						t.Errorf("%s: lookup %#x between functions: %v, want ErrNoFDE", path, want.End(), err)
					}
				}
			}
			if _, err := ix.lookup(all[0].Begin() - 1); !errors.Is(err, ErrNoFDE) {
				t.Errorf("%s: lookup before the first function: %v, want ErrNoFDE", path, err)
			}
			if whole != (opens == 0) {
				t.Errorf("%s: whole %v: file opened %d times", path, whole, opens)
			}
			tested++
		}
		f.Close()
	}
	if tested == 0 {
		t.Fatal("no library tested")
	}
}

func sameFDE(t *testing.T, pc uint64, got, want *frame.FrameDescriptionEntry) {
	t.Helper()
	g, w := got.CIE, want.CIE
	if got.Begin() != want.Begin() || got.End() != want.End() || !bytes.Equal(nopless(got.Instructions), nopless(want.Instructions)) ||
		g.Augmentation != w.Augmentation || g.CodeAlignmentFactor != w.CodeAlignmentFactor ||
		g.DataAlignmentFactor != w.DataAlignmentFactor || g.ReturnAddressRegister != w.ReturnAddressRegister ||
		!bytes.Equal(g.InitialInstructions, w.InitialInstructions) {
		t.Fatalf("at %#x: FDE %#x-%#x (CIE %+v), want %#x-%#x (CIE %+v)", pc, got.Begin(), got.End(), *g, want.Begin(), want.End(), *w)
	}
	// The rules they give must agree too.
	gc, gerr := got.EstablishFrame(pc)
	wc, werr := want.EstablishFrame(pc)
	if (gerr == nil) != (werr == nil) || gerr == nil && (!reflect.DeepEqual(gc.CFA, wc.CFA) || !reflect.DeepEqual(gc.Regs, wc.Regs)) {
		t.Fatalf("at %#x: frame %+v, %v; want %+v, %v", pc, gc, gerr, wc, werr)
	}
}

// nopless drops the trailing DW_CFA_nop padding of call frame
// instructions: ParseCFI, trimming .eh_frame's zero terminator, trims the
// padding of the last entry with it.
func nopless(b []byte) []byte { return bytes.TrimRight(b, "\x00") }

// A corrupt header or table gives an error, never a panic nor a read
// outside .eh_frame.
func FuzzEhIndex(f *testing.F) {
	ef, err := elf.Open(ehLibs[0])
	if err != nil {
		f.Fatal(err)
	}
	hs, es := ef.Section(".eh_frame_hdr"), ef.Section(".eh_frame")
	hdr, _ := hs.Data()
	eh, _ := es.Data()
	ef.Close()
	f.Add(hdr[:min(len(hdr), 4096)], eh[:min(len(eh), 4096)], uint64(0))
	f.Add([]byte{1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0}, []byte{0x10, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b}, uint64(0x10))
	f.Fuzz(func(t *testing.T, hdr, eh []byte, pc uint64) {
		const hdrAddr, frameAddr = 0x1000, 0x2000
		// The header must point at .eh_frame: make the fuzzer's pointer do so.
		if len(hdr) >= 8 && hdr[1] == 0x1b {
			binary.LittleEndian.PutUint32(hdr[4:], uint32(frameAddr-hdrAddr-4))
		}
		ix, err := parseEhHdr(hdr, binary.LittleEndian, hdrAddr, frameAddr, uint64(len(eh)))
		if err != nil {
			return
		}
		ix.frame = eh
		for i := 0; i < len(ix.table)/8 && i < 16; i++ {
			start, _ := ix.entry(i)
			ix.lookup(start)
		}
		ix.lookup(pc)
		ix.frame = nil
		ix.fdes = map[uint64]*frame.FrameDescriptionEntry{}
		ix.cies = map[uint64][]byte{}
		ix.frameOff = 0
		ix.open = func() (io.ReaderAt, io.Closer, error) { return boundedReader{t, eh}, io.NopCloser(nil), nil }
		ix.lookup(pc)
	})
}

// boundedReader fails its test on a read past its bytes.
type boundedReader struct {
	t *testing.T
	b []byte
}

func (r boundedReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(r.b)) {
		r.t.Fatalf("read %d bytes at %#x of a %d-byte .eh_frame", len(p), off, len(r.b))
	}
	return copy(p, r.b[off:]), nil
}
