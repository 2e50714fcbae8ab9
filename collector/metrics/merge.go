package metrics

import (
	"sort"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

// Our own families aggregate coarser than the compatibility families (by
// kernel name; by operation and dtype), so entries that differ only in
// compatibility labels are merged here.

type mergedKernel struct {
	name string
	d    Durations
}

type mergedCollective struct {
	op, dtype string
	d         Durations
	bw        float64 // count-weighted mean bus bandwidth
}

func mergeKernels(ks []Kernel) []mergedKernel {
	idx := map[string]int{}
	var out []mergedKernel
	for _, k := range ks {
		name := orUnknown(k.Name)
		i, ok := idx[name]
		if !ok {
			idx[name] = len(out)
			out = append(out, mergedKernel{name: name, d: k.Durations})
			continue
		}
		out[i].d = addDurations(out[i].d, k.Durations)
	}
	return out
}

func mergeCollectives(cs []Collective) []mergedCollective {
	idx := map[[2]string]int{}
	var out []mergedCollective
	var weight []float64
	for _, c := range cs {
		key := [2]string{orUnknown(c.Operation), orUnknown(c.DType)}
		w := float64(c.Durations.Count)
		i, ok := idx[key]
		if !ok {
			idx[key] = len(out)
			out = append(out, mergedCollective{op: key[0], dtype: key[1], d: c.Durations, bw: c.BusBandwidth})
			weight = append(weight, w)
			continue
		}
		if tw := weight[i] + w; tw > 0 {
			out[i].bw = (out[i].bw*weight[i] + c.BusBandwidth*w) / tw
		}
		weight[i] += w
		out[i].d = addDurations(out[i].d, c.Durations)
	}
	return out
}

// addDurations sums counts, sums and buckets (by upper bound); Min/Max/Avg
// are combined, P99 takes the larger (an upper estimate).
func addDurations(a, b Durations) Durations {
	r := Durations{Count: a.Count + b.Count, Sum: a.Sum + b.Sum, Min: a.Min, Max: max(a.Max, b.Max), P99: max(a.P99, b.P99)}
	if b.Count > 0 && (a.Count == 0 || b.Min < a.Min) {
		r.Min = b.Min
	}
	if r.Count > 0 {
		r.Avg = r.Sum / float64(r.Count)
	}
	m := buckets(a.Buckets)
	for _, bk := range b.Buckets {
		m[bk.UpperBound] += bk.Count
	}
	for ub, n := range m {
		r.Buckets = append(r.Buckets, Bucket{UpperBound: ub, Count: n})
	}
	sort.Slice(r.Buckets, func(i, j int) bool { return r.Buckets[i].UpperBound < r.Buckets[j].UpperBound })
	return r
}

// latestXids keeps the latest event per (device, uuid, xid), the series key.
func latestXids(xs []dumpfile.Xid) []dumpfile.Xid {
	type key struct {
		dev  int
		uuid string
		xid  uint64
	}
	idx := map[key]int{}
	var out []dumpfile.Xid
	for _, x := range xs {
		k := key{x.Device, x.UUID, x.Xid}
		if i, ok := idx[k]; ok {
			if x.Time.After(out[i].Time) {
				out[i] = x
			}
			continue
		}
		idx[k] = len(out)
		out = append(out, x)
	}
	return out
}
