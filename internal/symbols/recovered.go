package symbols

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// crashed is called with what a recover below caught when it was a
// runtime error (an index out of range, a nil dereference): a bug in our
// parsing, not corrupt input turned away. The fuzz targets set it to fail;
// it is nil otherwise.
var crashed func(r any)

// recovered turns what recover caught, reading one library's DWARF or
// symbols, into that library's error: a library that cannot be read costs
// its own symbols, never the monitor.
func recovered(r any) error {
	if _, ok := r.(runtime.Error); ok && crashed != nil {
		crashed(r)
	}
	if err, ok := r.(error); ok {
		return err
	}
	return fmt.Errorf("%v", r)
}

// faultSafely runs f. When mapped says f reads memory mapped from a file,
// a fault there (the file truncated since) or any other panic of f is
// returned as its error (see recovered) instead of crashing.
func faultSafely(mapped bool, f func()) (err error) {
	if !mapped {
		f()
		return nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = recovered(r)
		}
	}()
	f()
	return nil
}
