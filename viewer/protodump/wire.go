package protodump

import "fmt"

// Wire types of the protobuf encoding.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// value is one decoded field: num for varints and fixed-width fields, bytes
// (a sub-slice of the input) for length-delimited ones.
type value struct {
	num   uint64
	bytes []byte
}

// fields calls fn with every field of the message in data, in order. A
// malformed message (a bad varint, a length past the end, a group or
// reserved wire type, field number 0) is ErrMalformed.
func fields(data []byte, fn func(num int, v value) error) error {
	for len(data) > 0 {
		tag, n := varint(data)
		if n == 0 {
			return fmt.Errorf("%w: bad tag", ErrMalformed)
		}
		data = data[n:]
		num, wt := tag>>3, tag&7
		if num == 0 || num > 1<<29-1 {
			return fmt.Errorf("%w: field number %d", ErrMalformed, num)
		}
		var v value
		switch wt {
		case wireVarint:
			if v.num, n = varint(data); n == 0 {
				return fmt.Errorf("%w: bad varint in field %d", ErrMalformed, num)
			}
		case wireFixed64:
			if n = 8; len(data) < n {
				return fmt.Errorf("%w: field %d cut short", ErrMalformed, num)
			}
			for i := 7; i >= 0; i-- {
				v.num = v.num<<8 | uint64(data[i])
			}
		case wireFixed32:
			if n = 4; len(data) < n {
				return fmt.Errorf("%w: field %d cut short", ErrMalformed, num)
			}
			for i := 3; i >= 0; i-- {
				v.num = v.num<<8 | uint64(data[i])
			}
		case wireBytes:
			size, m := varint(data)
			if m == 0 || size > uint64(len(data)-m) {
				return fmt.Errorf("%w: field %d: length past the end", ErrMalformed, num)
			}
			v.bytes = data[m : m+int(size)]
			n = m + int(size)
		default:
			return fmt.Errorf("%w: wire type %d in field %d", ErrMalformed, wt, num)
		}
		data = data[n:]
		if err := fn(int(num), v); err != nil {
			return err
		}
	}
	return nil
}

// varint decodes a base-128 varint; n is 0 when data holds none (cut short,
// or longer than 10 bytes).
func varint(data []byte) (v uint64, n int) {
	for i := 0; i < len(data) && i < 10; i++ {
		b := data[i]
		if i == 9 && b > 1 {
			return 0, 0
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}
