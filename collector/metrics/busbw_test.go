package metrics

import "testing"

func TestBusBandwidth(t *testing.T) {
	for _, tc := range []struct {
		op      string
		bytes   uint64
		n       int
		seconds float64
		want    float64
	}{
		{"AllReduce", 1 << 30, 8, 1, float64(1<<30) * 2 * 7 / 8},
		{"AllReduce", 1000, 1, 1, 0}, // one rank moves nothing
		{"AllGather", 1000, 4, 0.5, 6000},
		{"ReduceScatter", 1000, 4, 1, 3000},
		{"Broadcast", 1000, 4, 2, 500},
		{"Reduce", 1000, 4, 1, 1000},
		{"Send", 1000, 2, 1, 1000},
		{"Recv", 1000, 2, 1, 1000},
		{"AllToAll", 1000, 2, 1, 0},
		{"AllReduce", 1000, 8, 0, 0},
		{"AllReduce", 1000, 0, 1, 0},
	} {
		if got := BusBandwidth(tc.op, tc.bytes, tc.n, tc.seconds); got != tc.want {
			t.Errorf("BusBandwidth(%s, %d, %d, %g) = %g, want %g", tc.op, tc.bytes, tc.n, tc.seconds, got, tc.want)
		}
	}
}

func TestObserve(t *testing.T) {
	var d Durations
	for _, s := range []float64{0.002, 0.0005, 20} {
		d.Observe(s)
	}
	if d.Count != 3 || d.Sum != 20.0025 || d.Min != 0.0005 || d.Max != 20 || d.Avg != 20.0025/3 {
		t.Fatalf("%+v", d)
	}
	want := map[float64]uint64{1e-5: 0, 1e-3: 1, 3e-3: 2, 10: 2}
	for _, b := range d.Buckets {
		if w, ok := want[b.UpperBound]; ok && b.Count != w {
			t.Errorf("bucket le=%g: %d, want %d", b.UpperBound, b.Count, w)
		}
	}
	if len(d.Buckets) != len(DefaultBuckets) {
		t.Errorf("%d buckets", len(d.Buckets))
	}
}
