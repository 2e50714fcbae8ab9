//go:build !linux

package python

import "errors"

func readMem(pid int, addr uint64, buf []byte) error {
	return errors.New("reading process memory is only supported on linux")
}

func readPartial(pid int, addr uint64, buf []byte) (int, error) {
	return 0, errors.New("reading process memory is only supported on linux")
}
