package protodump

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// value is one decoded field: num for varints and fixed-width fields, bytes
// (a sub-slice of the input) for length-delimited ones.
type value struct {
	num   uint64
	bytes []byte
}

// fields calls fn with every field of the message in data, in order, read
// with protowire. A malformed message (a bad varint, a length past the end,
// a group, a reserved wire type, an invalid field number) is ErrMalformed,
// with protowire's reason.
func fields(data []byte, fn func(num int, v value) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("%w: tag: %w", ErrMalformed, protowire.ParseError(n))
		}
		data = data[n:]
		var v value
		switch typ {
		case protowire.VarintType:
			v.num, n = protowire.ConsumeVarint(data)
		case protowire.Fixed64Type:
			v.num, n = protowire.ConsumeFixed64(data)
		case protowire.Fixed32Type:
			var u uint32
			u, n = protowire.ConsumeFixed32(data)
			v.num = uint64(u)
		case protowire.BytesType:
			v.bytes, n = protowire.ConsumeBytes(data)
		default: // groups: xpu_timer's messages have none
			return fmt.Errorf("%w: wire type %d in field %d", ErrMalformed, typ, num)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %w", ErrMalformed, num, protowire.ParseError(n))
		}
		data = data[n:]
		if err := fn(int(num), v); err != nil {
			return err
		}
	}
	return nil
}
