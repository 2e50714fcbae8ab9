package timer

import (
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Summary describes a set of durations in nanoseconds. P99 comes from a
// log-linear histogram with 8 buckets per power of two (within 6.25%).
type Summary struct {
	Count uint64 `json:"count"`
	SumNs int64  `json:"sum_ns"`
	MinNs int64  `json:"min_ns"`
	MaxNs int64  `json:"max_ns"`
	P50Ns int64  `json:"p50_ns"`
	P99Ns int64  `json:"p99_ns"`
}

// MeanNs is the average duration, 0 when empty.
func (s Summary) MeanNs() float64 {
	if s.Count == 0 {
		return 0
	}
	return float64(s.SumNs) / float64(s.Count)
}

// KernelStat is the timing of one kernel name in one process.
// Observed durations are upper bounds (see the package documentation);
// Exact ones come from cudaEventElapsedTime around exactly this kernel.
type KernelStat struct {
	Name     string  `json:"name"`
	Observed Summary `json:"observed"`
	Exact    Summary `json:"exact"`
}

// Best is the exact summary when the application measured any, else the
// observed one.
func (k KernelStat) Best() Summary {
	if k.Exact.Count > 0 {
		return k.Exact
	}
	return k.Observed
}

// CollKey groups collectives for statistics.
type CollKey struct {
	Op        string `json:"op"`
	Dtype     string `json:"dtype"`
	SizeClass uint64 `json:"size_class"` // bytes rounded up to a power of two
	NRanks    int32  `json:"nranks"`     // 0 if unknown
}

func collKey(op, dtype string, bytes uint64, nranks int32) CollKey {
	return CollKey{Op: op, Dtype: dtype, SizeClass: SizeClass(bytes), NRanks: nranks}
}

// SizeClass rounds bytes up to a power of two (0 stays 0).
func SizeClass(bytes uint64) uint64 {
	if bytes <= 1 {
		return bytes
	}
	if bytes > 1<<63 {
		return 1 << 63
	}
	return 1 << bits.Len64(bytes-1)
}

// CollStat is the timing of one collective key in one process, with
// bandwidths in Gbit/s by the nccl-tests convention. Bandwidths use the
// exact durations when there are any, else the observed upper bounds
// (which make them lower bounds).
type CollStat struct {
	Key       CollKey `json:"key"`
	Observed  Summary `json:"observed"`
	Exact     Summary `json:"exact"`
	Bytes     uint64  `json:"bytes"` // per-rank buffer bytes of the timed ops
	AlgBWGbps float64 `json:"algbw_gbps"`
	BusBWGbps float64 `json:"busbw_gbps"`
}

// Best is the exact summary when the application measured any, else the
// observed one.
func (c CollStat) Best() Summary {
	if c.Exact.Count > 0 {
		return c.Exact
	}
	return c.Observed
}

// Stats are the timing statistics of one process (or of all, merged).
type Stats struct {
	Kernels     []KernelStat `json:"kernels"`
	Collectives []CollStat   `json:"collectives"`
	Spans       Summary      `json:"spans"` // cudaEventElapsedTime spans not around exactly one op
}

// AlgBytes is the data volume nccl-tests divides by time for the
// algorithm bandwidth, from the per-rank buffer bytes S over n ranks:
// S·n for AllGather and ReduceScatter (S is the shard), S otherwise.
func AlgBytes(op string, s float64, n int32) float64 {
	switch op {
	case "AllGather", "ReduceScatter":
		return s * float64(max(n, 1))
	}
	return s
}

// BusBytes is the data volume nccl-tests divides by time for the bus
// bandwidth: AllReduce S·2(n−1)/n, AllGather and ReduceScatter S·(n−1),
// Broadcast, Reduce, Send and Recv S. It is 0 for a collective whose rank
// count is unknown.
func BusBytes(op string, s float64, n int32) float64 {
	switch op {
	case "AllReduce":
		if n <= 0 {
			return 0
		}
		return s * 2 * float64(n-1) / float64(n)
	case "AllGather", "ReduceScatter":
		if n <= 0 {
			return 0
		}
		return s * float64(n-1)
	}
	return s
}

// Gbps is bytes over nanoseconds in Gbit/s.
func Gbps(bytes float64, ns int64) float64 {
	if ns <= 0 {
		return 0
	}
	return bytes * 8 / float64(ns)
}

// Stats returns the statistics of every process merged.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	var all procStats
	for _, p := range e.procs {
		all.merge(&p.stats)
	}
	return all.export()
}

// ProcStats returns the statistics of one process.
func (e *Engine) ProcStats(pid int) Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil {
		return Stats{}
	}
	return p.stats.export()
}

// Internal accumulation.

const (
	subBits    = 3
	subBuckets = 1 << subBits
	nBuckets   = (63-subBits)*subBuckets + subBuckets // durations are non-negative int64
)

// dist accumulates durations in bounded memory.
type dist struct {
	count    uint64
	sum      int64
	min, max int64
	buckets  *[nBuckets]uint32
}

func bucketOf(v int64) int {
	if v < subBuckets {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1
	sub := int(uint64(v)>>(e-subBits)) & (subBuckets - 1)
	return (e-subBits+1)*subBuckets + sub
}

// bucketMid is a representative value of bucket b.
func bucketMid(b int) int64 {
	if b < subBuckets {
		return int64(b)
	}
	e := b/subBuckets + subBits - 1
	sub := b % subBuckets
	low := uint64(subBuckets+sub) << (e - subBits)
	width := uint64(1) << (e - subBits)
	mid := low + width/2
	if mid > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(mid)
}

func (d *dist) add(v int64) {
	v = max(v, 0)
	if d.count == 0 || v < d.min {
		d.min = v
	}
	if v > d.max {
		d.max = v
	}
	d.count++
	d.sum += v
	if d.buckets == nil {
		d.buckets = new([nBuckets]uint32)
	}
	b := &d.buckets[bucketOf(v)]
	if *b < math.MaxUint32 {
		*b++
	}
}

func (d *dist) merge(o *dist) {
	if o.count == 0 {
		return
	}
	if d.count == 0 || o.min < d.min {
		d.min = o.min
	}
	d.max = max(d.max, o.max)
	d.count += o.count
	d.sum += o.sum
	if d.buckets == nil {
		d.buckets = new([nBuckets]uint32)
	}
	for i, n := range o.buckets {
		d.buckets[i] = uint32(min(uint64(d.buckets[i])+uint64(n), math.MaxUint32))
	}
}

func (d *dist) quantile(q float64) int64 {
	if d.count == 0 || d.buckets == nil {
		return 0
	}
	var total uint64
	for _, n := range d.buckets {
		total += uint64(n)
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var seen uint64
	for b, n := range d.buckets {
		seen += uint64(n)
		if seen >= rank {
			return min(max(bucketMid(b), d.min), d.max)
		}
	}
	return d.max
}

func (d *dist) summary() Summary {
	return Summary{Count: d.count, SumNs: d.sum, MinNs: d.min, MaxNs: d.max, P50Ns: d.quantile(0.50), P99Ns: d.quantile(0.99)}
}

type kernelAcc struct{ observed, exact dist }

type collAcc struct {
	observed, exact           dist
	observedBytes, exactBytes uint64
}

// otherKernel collects kernels beyond the per-process bound on names.
const otherKernel = "[other]"

type procStats struct {
	kernels   map[string]*kernelAcc
	colls     map[CollKey]*collAcc
	spans     dist
	funcNames map[uint64]string
	recent    [kernelSlots]kernelSlot // see kernelSlot
}

// kernelSlot remembers the accumulator of a kernel completed lately, by
// its function handle and the name its launch carried: a step launches
// and completes the same few dozen kernels over and over, and finding
// each through two maps (its handle's name, then the name's accumulator)
// took a fifth of the reader's CPU on the testbed's training step.
// Accumulators are never removed from kernels, so a slot never points at
// a stale one.
type kernelSlot struct {
	fn   uint64
	name string // the name the launch carried ("": unnamed)
	key  string // its statistics key (kernelName)
	acc  *kernelAcc
}

// kernelSlots is how many kernels procStats.recent remembers, by handle.
const kernelSlots = 64

// slot is the slot of procStats.recent for handle fn.
func (s *procStats) slot(fn uint64) *kernelSlot { return &s.recent[(fn^fn>>6)%kernelSlots] }

// holds says whether the slot is that of the kernel launched with name
// and handle fn.
func (k *kernelSlot) holds(name string, fn uint64) bool {
	return k.acc != nil && k.fn == fn && k.name == name
}

func (s *procStats) kernel(name string) *kernelAcc {
	if s.kernels == nil {
		s.kernels = make(map[string]*kernelAcc)
	}
	k := s.kernels[name]
	if k == nil {
		if len(s.kernels) >= maxStatKeys {
			name = otherKernel
			if k = s.kernels[name]; k != nil {
				return k
			}
		}
		k = &kernelAcc{}
		s.kernels[name] = k
	}
	return k
}

func (s *procStats) coll(key CollKey) *collAcc {
	if s.colls == nil {
		s.colls = make(map[CollKey]*collAcc)
	}
	c := s.colls[key]
	if c == nil {
		if len(s.colls) >= maxStatKeys {
			key = CollKey{Op: otherKernel}
			if c = s.colls[key]; c != nil {
				return c
			}
		}
		c = &collAcc{}
		s.colls[key] = c
	}
	return c
}

func (s *procStats) merge(o *procStats) {
	for name, k := range o.kernels {
		a := s.kernel(name)
		a.observed.merge(&k.observed)
		a.exact.merge(&k.exact)
	}
	for key, c := range o.colls {
		a := s.coll(key)
		a.observed.merge(&c.observed)
		a.exact.merge(&c.exact)
		a.observedBytes += c.observedBytes
		a.exactBytes += c.exactBytes
	}
	s.spans.merge(&o.spans)
}

func (s *procStats) export() Stats {
	var out Stats
	for name, k := range s.kernels {
		out.Kernels = append(out.Kernels, KernelStat{Name: name, Observed: k.observed.summary(), Exact: k.exact.summary()})
	}
	slices.SortFunc(out.Kernels, func(a, b KernelStat) int { return strings.Compare(a.Name, b.Name) })
	for key, c := range s.colls {
		cs := CollStat{Key: key, Observed: c.observed.summary(), Exact: c.exact.summary()}
		bytes, ns := c.observedBytes, c.observed.sum
		if c.exact.count > 0 {
			bytes, ns = c.exactBytes, c.exact.sum
		}
		cs.Bytes = bytes
		cs.AlgBWGbps = Gbps(AlgBytes(key.Op, float64(bytes), key.NRanks), ns)
		cs.BusBWGbps = Gbps(BusBytes(key.Op, float64(bytes), key.NRanks), ns)
		out.Collectives = append(out.Collectives, cs)
	}
	slices.SortFunc(out.Collectives, func(a, b CollStat) int {
		if c := strings.Compare(a.Key.Op, b.Key.Op); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key.Dtype, b.Key.Dtype); c != 0 {
			return c
		}
		if a.Key.SizeClass != b.Key.SizeClass {
			if a.Key.SizeClass < b.Key.SizeClass {
				return -1
			}
			return 1
		}
		return int(a.Key.NRanks - b.Key.NRanks)
	})
	out.Spans = s.spans.summary()
	return out
}
