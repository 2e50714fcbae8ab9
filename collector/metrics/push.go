package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"

	"github.com/xpu-timer/xpu-timer/timer"
)

// Pusher pushes hang events to a Prometheus Pushgateway, one group per rank
// (grouping key job=<job name>, rank=<rank>). A Pushgateway never forgets a
// series, so only hang events are pushed, and a rank's group is deleted when
// the rank recovers or disappears, and every group when the job ends (Close).
//
// The agent calls Sync with every fresh snapshot; the time is passed in so
// the re-push period can be tested without sleeping.
type Pusher struct {
	url      string
	job      string
	static   []string // ip, job_name, pod_name
	interval time.Duration
	client   *http.Client

	mu     sync.Mutex
	pushed map[int]time.Time // rank -> time of its last successful push
}

// DefaultPushInterval is how often a hung rank is pushed again.
const DefaultPushInterval = 15 * time.Second

// NewPusher returns a pusher to the Pushgateway at url that pushes a hung
// rank at once and then again every interval while it stays hung.
func NewPusher(url string, static Static, interval time.Duration) *Pusher {
	c := newCollector(static)
	if interval <= 0 {
		interval = DefaultPushInterval
	}
	return &Pusher{
		url: url, job: c.static[1], static: c.static, interval: interval,
		client: &http.Client{Timeout: 10 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()},
		pushed: make(map[int]time.Time),
	}
}

// Pushed returns the ranks whose groups the pusher believes exist, sorted.
func (p *Pusher) Pushed() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var rs []int
	for r := range p.pushed {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}

// Sync pushes the hung ranks of snap that were never pushed or were pushed
// at least one interval before now, and deletes the groups of ranks pushed
// before that are no longer hung. It tries every rank and returns the errors
// joined; a failed push or delete is retried on the next Sync.
func (p *Pusher) Sync(ctx context.Context, now time.Time, snap Snapshot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	hung := make(map[int]bool)
	for _, r := range snap.Ranks {
		if !r.Hung || hung[r.Rank] {
			continue
		}
		hung[r.Rank] = true
		if last, ok := p.pushed[r.Rank]; ok && now.Sub(last) < p.interval {
			continue
		}
		if err := p.push(ctx, r, now); err != nil {
			errs = append(errs, fmt.Errorf("push rank %d: %w", r.Rank, err))
			continue
		}
		p.pushed[r.Rank] = now
	}
	for rank := range p.pushed {
		if hung[rank] {
			continue
		}
		if err := p.delete(ctx, rank); err != nil {
			errs = append(errs, fmt.Errorf("delete rank %d: %w", rank, err))
			continue
		}
		delete(p.pushed, rank)
	}
	return errors.Join(errs...)
}

// Close deletes every group the pusher created (the job ended) and closes
// its idle connections.
func (p *Pusher) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.client.CloseIdleConnections()
	var errs []error
	for rank := range p.pushed {
		if err := p.delete(ctx, rank); err != nil {
			errs = append(errs, fmt.Errorf("delete rank %d: %w", rank, err))
			continue
		}
		delete(p.pushed, rank)
	}
	return errors.Join(errs...)
}

func (p *Pusher) group(rank int) *push.Pusher {
	return push.New(p.url, p.job).Grouping("rank", strconv.Itoa(rank)).Client(p.client)
}

func (p *Pusher) push(ctx context.Context, r Rank, now time.Time) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(&hangEvent{static: p.static, r: r, now: now}); err != nil {
		return err
	}
	return p.group(r.Rank).Gatherer(reg).PushContext(ctx)
}

func (p *Pusher) delete(ctx context.Context, rank int) error {
	// push.Pusher.Delete takes no context: honour cancellation before it.
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.group(rank).Delete()
}

// Pushed families. The rank is the grouping key, so the series carry every
// other label of the scraped families.
var (
	pushLabels    = with(nodeLabels, "local_rank")
	pushHang      = prometheus.NewDesc("XPU_TIMER_COMMON_HANG", "xpu_timer compatibility: 1 if the rank is hung, else 0.", pushLabels, nil)
	pushRankHung  = prometheus.NewDesc("xpu_timer_rank_hung", "Whether the rank is hung (1) or not (0), by kind of hang.", with(pushLabels, "kind"), nil)
	pushOldestAge = prometheus.NewDesc("xpu_timer_oldest_op_age_seconds", "Age of the rank's oldest outstanding GPU operation.", pushLabels, nil)
	pushTime      = prometheus.NewDesc("xpu_timer_hang_push_timestamp_seconds", "Unix time of this push; a stale value means the pusher stopped.", pushLabels, nil)
)

// hangEvent is the one-rank collector pushed on a hang.
type hangEvent struct {
	static []string
	r      Rank
	now    time.Time
}

func (h *hangEvent) Describe(ch chan<- *prometheus.Desc) {
	ch <- pushHang
	ch <- pushRankHung
	ch <- pushOldestAge
	ch <- pushTime
}

func (h *hangEvent) Collect(ch chan<- prometheus.Metric) {
	l := with(h.static, strconv.Itoa(h.r.LocalRank))
	ch <- prometheus.MustNewConstMetric(pushHang, prometheus.GaugeValue, 1, l...)
	kind := h.r.HangKind
	if kind == "" {
		kind = timer.HangGPU
	}
	ch <- prometheus.MustNewConstMetric(pushRankHung, prometheus.GaugeValue, 1, with(l, string(kind))...)
	ch <- prometheus.MustNewConstMetric(pushOldestAge, prometheus.GaugeValue, h.r.OldestAgeSeconds, l...)
	ch <- prometheus.MustNewConstMetric(pushTime, prometheus.GaugeValue, float64(h.now.UnixNano())/1e9, l...)
}
