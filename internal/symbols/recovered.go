package symbols

import (
	"fmt"
	"runtime"
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
