// Package inflate decodes a zlib stream (RFC 1950, deflate of RFC 1951)
// held whole in memory into a buffer of known size, as far as asked and
// resumably: what an ELF section compressed with SHF_COMPRESSED is, and
// what a first stack dump spends most of its time on (libc's debug
// information alone is 2 MB of zlib that inflate to 6 MB).
//
// compress/flate reads its input a byte at a time through an interface
// and copies every byte through a sliding window. Here the input is a
// slice read eight bytes at a time into a 64-bit bit buffer, codes are
// decoded through one table lookup (two for the longest), and the output
// buffer is the window: matches copy within it. On the debug sections of
// this repository's benchmark that is about three times compress/flate's
// speed (BenchmarkInflate).
package inflate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"io"
)

// ahead is how far past a match decoding may write (see huffman).
const ahead = 16

// ErrCorrupt reports a stream that is not valid zlib, or whose decoded
// size or checksum differ from what was expected.
var ErrCorrupt = errors.New("corrupt zlib stream")

// Decoder decodes one zlib stream into a buffer of the stream's decoded
// size. It is not safe for concurrent use.
type Decoder struct {
	in    []byte
	pos   int    // next byte of in to load into bits
	bits  uint64 // bits loaded, next one lowest; bits above nbits are the input's next bits or zero
	nbits uint
	over  int // zero bytes loaded past the end of in

	out  []byte
	n    int  // bytes of out decoded
	last bool // the final block was decoded
	err  error

	lit     *litTable  // the current block's decoding tables
	dist    *distTable //
	litBuf  *litTable  // the decoder's own, for dynamic codes
	distBuf *distTable //
}

// NewZlib returns a decoder of the zlib stream in into out, whose length
// must be the stream's decoded size. Nothing is decoded until Fill.
func NewZlib(in, out []byte) (*Decoder, error) {
	if len(in) < 2+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(in))
	}
	cmf, flg := in[0], in[1]
	switch {
	case cmf&0x0f != 8 || cmf>>4 > 7:
		return nil, fmt.Errorf("%w: compression method %#x is not deflate", ErrCorrupt, cmf)
	case (uint(cmf)<<8|uint(flg))%31 != 0:
		return nil, fmt.Errorf("%w: header check", ErrCorrupt)
	case flg&0x20 != 0:
		return nil, fmt.Errorf("%w: preset dictionary", ErrCorrupt)
	}
	return &Decoder{in: in, pos: 2, out: out}, nil
}

// Filled returns how many bytes of the output are decoded.
func (d *Decoder) Filled() int { return d.n }

// Fill decodes on, a block at a time, until at least n bytes of the output
// are decoded, and returns how many are. Asked for the whole output, it
// decodes the stream to its end and checks its size and checksum. Output
// past what is decoded stays zero when it was (decoding writes up to
// ahead bytes past; Fill zeroes them again). An error is sticky.
func (d *Decoder) Fill(n int) (int, error) {
	for d.err == nil && !d.last && (d.n < n || n >= len(d.out)) {
		d.err = d.block()
	}
	clear(d.out[d.n:min(d.n+ahead, len(d.out))])
	if d.err == nil && d.last && d.n < len(d.out) {
		d.err = fmt.Errorf("%w: %d bytes decoded, %d expected", ErrCorrupt, d.n, len(d.out))
	}
	if d.err == nil && d.last && d.in != nil {
		d.err = d.trailer()
		d.in = nil // done: let the input go
	}
	return d.n, d.err
}

// refill loads bits until at least 56 are held. Past the end of the input
// it loads zeros, and fails once more than fit in bits would be consumed.
func (d *Decoder) refill() error {
	if d.pos+8 <= len(d.in) {
		// Load eight bytes, keep the whole ones that fit: the bits loaded
		// above nbits are the next ones of the input, loaded again next
		// time at the same places.
		d.bits |= binary.LittleEndian.Uint64(d.in[d.pos:]) << d.nbits
		d.pos += int(63-d.nbits) >> 3
		d.nbits |= 56
		return nil
	}
	for d.nbits <= 56 {
		var b byte
		if d.pos < len(d.in) {
			b = d.in[d.pos]
		} else {
			d.over++
		}
		d.bits |= uint64(b) << d.nbits
		d.nbits += 8
		d.pos++
	}
	if d.over > 8 {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// consumed checks that no bit past the end of the input was used.
func (d *Decoder) consumed() error {
	if 8*d.over > int(d.nbits) {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// take returns the next k bits (k ≤ 32), which must be loaded.
func (d *Decoder) take(k uint) uint32 {
	v := uint32(d.bits & (1<<k - 1))
	d.bits >>= k
	d.nbits -= k
	return v
}

// align drops the bits up to the next byte boundary and gives back the
// whole bytes loaded, so that pos is where the stream goes on.
func (d *Decoder) align() error {
	if err := d.consumed(); err != nil {
		return err
	}
	d.take(d.nbits & 7)
	d.pos -= int(d.nbits >> 3)
	d.bits, d.nbits = 0, 0
	if d.pos > len(d.in) {
		return io.ErrUnexpectedEOF
	}
	d.over = 0
	return nil
}

// trailer checks the Adler-32 checksum after the final block.
func (d *Decoder) trailer() error {
	if err := d.align(); err != nil {
		return err
	}
	if d.pos+4 > len(d.in) {
		return io.ErrUnexpectedEOF
	}
	if want := binary.BigEndian.Uint32(d.in[d.pos:]); adler32.Checksum(d.out) != want {
		return fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return nil
}

// block decodes one block.
func (d *Decoder) block() error {
	if err := d.refill(); err != nil {
		return err
	}
	d.last = d.take(1) == 1
	switch d.take(2) {
	case 0:
		return d.stored()
	case 1:
		d.lit, d.dist = fixedTables()
	case 2:
		if err := d.dynamic(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: reserved block type", ErrCorrupt)
	}
	return d.huffman()
}

// stored copies a stored block.
func (d *Decoder) stored() error {
	if err := d.align(); err != nil {
		return err
	}
	if d.pos+4 > len(d.in) {
		return io.ErrUnexpectedEOF
	}
	n := int(binary.LittleEndian.Uint16(d.in[d.pos:]))
	if ^uint16(n) != binary.LittleEndian.Uint16(d.in[d.pos+2:]) {
		return fmt.Errorf("%w: stored block length check", ErrCorrupt)
	}
	d.pos += 4
	switch {
	case d.pos+n > len(d.in):
		return io.ErrUnexpectedEOF
	case d.n+n > len(d.out):
		return fmt.Errorf("%w: more than the %d bytes expected", ErrCorrupt, len(d.out))
	}
	d.n += copy(d.out[d.n:], d.in[d.pos:d.pos+n])
	d.pos += n
	return nil
}

// huffman decodes the codes of a compressed block up to its end. The
// decoder's state is kept in locals here, in registers, and saved on the
// way out. The tables are arrays indexed under a mask, so that no lookup
// is bounds-checked; an entry's subtable lies within the table built
// (build), so the mask never changes an index.
func (d *Decoder) huffman() (err error) {
	lit, dist := d.lit, d.dist
	in, pos, bits, nbits := d.in, d.pos, d.bits, d.nbits
	out, o := d.out, d.n
	for {
		if nbits < 48 {
			// At most 15+5 bits of length and 15+13 of distance follow.
			if pos+8 <= len(in) {
				bits |= binary.LittleEndian.Uint64(in[pos:]) << nbits
				pos += int(63-nbits) >> 3
				nbits |= 56
			} else {
				d.pos, d.bits, d.nbits = pos, bits, nbits
				if err = d.refill(); err != nil {
					break
				}
				pos, bits, nbits = d.pos, d.bits, d.nbits
			}
		}
		e := lit[bits&litMask]
		if e&kindMask == kindLiteral && uint(o)+1 < uint(len(out)) {
			// Literals are most codes: two in a row from the primary
			// table (at most 2*litBits of the 48 bits held) without
			// going round the loop.
			bits >>= e & 31
			nbits -= uint(e & 31)
			out[o] = byte(e >> 16)
			o++
			if e = lit[bits&litMask]; e&kindMask == kindLiteral {
				bits >>= e & 31
				nbits -= uint(e & 31)
				out[o] = byte(e >> 16)
				o++
			}
			continue
		}
		if e&kindMask == kindSub {
			bits >>= litBits
			nbits -= litBits
			e = lit[(e>>16+uint32(bits&(1<<(e>>8&15)-1)))&litTableMask]
		}
		if e&kindMask == kindLiteral {
			bits >>= e & 31
			nbits -= uint(e & 31)
			if o >= len(out) {
				err = fmt.Errorf("%w: more than the %d bytes expected", ErrCorrupt, len(out))
				break
			}
			out[o] = byte(e >> 16)
			o++
			continue
		}
		if e&kindMask != kindLength {
			bits >>= e & 31
			nbits -= uint(e & 31)
			if e&kindMask != kindEnd {
				err = fmt.Errorf("%w: invalid literal/length code", ErrCorrupt)
			}
			break
		}
		// The code and its extra bits at once.
		n, extra := e&31, e>>8&15
		length := int(e>>16 + uint32(bits>>n)&(1<<extra-1))
		bits >>= n + extra
		nbits -= uint(n + extra)

		e = dist[bits&distMask]
		if e&kindMask == kindSub {
			bits >>= distBits
			nbits -= distBits
			e = dist[(e>>16+uint32(bits&(1<<(e>>8&15)-1)))&distTableMask]
		}
		if e&kindMask != kindDistance {
			err = fmt.Errorf("%w: invalid distance code", ErrCorrupt)
			break
		}
		n, extra = e&31, e>>8&15
		back := int(e>>16 + uint32(bits>>n)&(1<<extra-1))
		bits >>= n + extra
		nbits -= uint(n + extra)

		if back > o {
			err = fmt.Errorf("%w: distance %d before the start", ErrCorrupt, back)
			break
		}
		end := o + length
		if end > len(out) {
			err = fmt.Errorf("%w: more than the %d bytes expected", ErrCorrupt, len(out))
			break
		}
		from := o - back
		if end+ahead <= len(out) {
			switch {
			case back >= 8:
				// Eight bytes at a time, each read from bytes already
				// written, perhaps a few more than the match: later
				// bytes overwrite those. Most matches are short: two
				// words whatever the length, no loop to mispredict.
				binary.LittleEndian.PutUint64(out[o:], binary.LittleEndian.Uint64(out[from:]))
				binary.LittleEndian.PutUint64(out[o+8:], binary.LittleEndian.Uint64(out[from+8:]))
				for o, from = o+16, from+16; o < end; o, from = o+8, from+8 {
					binary.LittleEndian.PutUint64(out[o:], binary.LittleEndian.Uint64(out[from:]))
				}
				o = end
				continue
			case back == 1:
				// A run of one byte (zeros, mostly), eight at a time.
				v := uint64(out[from]) * 0x0101010101010101
				for ; o < end; o += 8 {
					binary.LittleEndian.PutUint64(out[o:], v)
				}
				o = end
				continue
			}
		}
		if back >= length {
			copy(out[o:end], out[from:])
			o = end
			continue
		}
		// Overlapping: the run repeats; copy what is there, doubling.
		for o < end {
			o += copy(out[o:end], out[from:o])
		}
	}
	d.pos, d.bits, d.nbits, d.n = pos, bits, nbits, o
	if err != nil {
		return err
	}
	return d.consumed()
}
