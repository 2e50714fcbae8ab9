package trace

import (
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	if got := Name(3, 8); got != "00003-00008.trace.json" {
		t.Fatal(got)
	}
	if !strings.HasSuffix(Name(0, 1), Ext) {
		t.Fatal("no ext")
	}
}
