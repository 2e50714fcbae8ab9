package monoclock

import (
	"testing"
	"time"
)

// Now advances with time and is not the wall clock.
func TestNow(t *testing.T) {
	a := Now()
	time.Sleep(10 * time.Millisecond)
	b := Now()
	if a <= 0 || b-a < int64(10*time.Millisecond) || b-a > int64(5*time.Second) {
		t.Fatalf("Now %d then %d, 10 ms apart", a, b)
	}
	if wall := time.Now().UnixNano(); b > wall/2 {
		t.Fatalf("Now %d looks like the wall clock %d", b, wall)
	}
}
