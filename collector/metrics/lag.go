package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The early warning's families: where each rank stands on its
// communicators, the ranks its node sees lagging, and what a rank that
// issues no collective is doing. The alert rules in deploy/prometheus
// compare the sequence numbers of every node of a job and join the
// activity of the rank behind.
//
// Cardinality: per rank, at most MaxComms communicators (3 series each),
// those most recently active, and one that the rank stopped using while
// it uses others drops out after CommIdle (the agent chooses, see
// agent/lag.go); at most one lagging series per communicator; at most one
// activity series, while the rank issues no collective.
const (
	// MaxComms bounds the communicators served per rank.
	MaxComms = 16
	// CommIDDigits is how many hex digits of a communicator's id its comm
	// label keeps: the same on every rank of the communicator.
	CommIDDigits = 12
	// maxDetail bounds the activity's detail label, in bytes.
	maxDetail = 160
)

// Comm is where a rank stands on one communicator.
type Comm struct {
	ID          string  // the communicator's id (its first CommIDDigits hex digits are served)
	Issued      uint64  // sequence number of the last collective the rank issued on it
	Completed   uint64  // sequence number of the last collective known complete
	WaitSeconds float64 // how long a thread of the rank has waited in a collective of it; 0 when none waits
}

// Lag is a communicator on which the rank's peers on this node wait in a
// collective it has not issued, or did until it caught up.
type Lag struct {
	Comm     string // the communicator's id
	Activity string // what the rank was doing when the warning came (collector/capture/activity)
	Lagging  bool   // false once it caught up: the series stays, at 0
}

// Activity is what a rank that has issued no collective for a while is
// doing, from one stack sample (collector/capture/activity).
type Activity struct {
	Kind   string
	Detail string
}

// ShortComm is the comm label of a communicator id.
func ShortComm(id string) string {
	if len(id) > CommIDDigits {
		return id[:CommIDDigits]
	}
	return id
}

// lagDescs are the early warning's descriptors.
type lagDescs struct {
	issued, completed, wait, lagging, activity *prometheus.Desc
}

func newLagDescs() lagDescs {
	comm := with(rankLabels, "comm")
	return lagDescs{
		issued: prometheus.NewDesc("xpu_timer_collective_issued",
			"Sequence number of the last collective the rank issued on the communicator (comm: the first 12 hex digits of its id, the same on every rank).", comm, nil),
		completed: prometheus.NewDesc("xpu_timer_collective_completed",
			"Sequence number of the last collective of the communicator the rank is known to have completed.", comm, nil),
		wait: prometheus.NewDesc("xpu_timer_collective_wait_seconds",
			"How long a thread of the rank has waited in a collective of the communicator (the one after the last completed), 0 when none waits.", comm, nil),
		lagging: prometheus.NewDesc("xpu_timer_rank_lagging",
			"1 while peers of the rank on this node have waited XPU_TIMER_LAG_WARN or more in a collective of the communicator that the rank has not issued, 0 once it caught up; activity is what it was doing.", with(comm, "activity"), nil),
		activity: prometheus.NewDesc("xpu_timer_rank_activity",
			"1 while the rank has issued no collective for about XPU_TIMER_LAG_WARN: what it is doing (checkpoint, dataloader, compile, gc, gpu-wait, collective, python, unknown), from one stack sample; detail names the frame, wait or collective.", with(rankLabels, "activity", "detail"), nil),
	}
}

func (d lagDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.issued
	ch <- d.completed
	ch <- d.wait
	ch <- d.lagging
	ch <- d.activity
}

// collect emits the early warning's series of one rank; rl are its labels.
func (d lagDescs) collect(ch chan<- prometheus.Metric, rl []string, r Rank) {
	gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, with(rl, extra...)...)
	}
	comms := firstComms()
	for _, c := range r.Comms {
		if id, ok := comms(c.ID); ok {
			gauge(d.issued, float64(c.Issued), id)
			gauge(d.completed, float64(c.Completed), id)
			gauge(d.wait, c.WaitSeconds, id)
		}
	}
	lagged := firstComms()
	for _, l := range r.Lags {
		if id, ok := lagged(l.Comm); ok {
			gauge(d.lagging, b2f(l.Lagging), id, l.Activity)
		}
	}
	if a := r.Activity; a != nil {
		detail := a.Detail
		if len(detail) > maxDetail {
			detail = detail[:maxDetail]
		}
		gauge(d.activity, 1, a.Kind, detail)
	}
}

// firstComms returns a function that gives the comm label of each
// communicator id it is passed, and whether it is among the first
// MaxComms distinct labels.
func firstComms() func(id string) (string, bool) {
	seen := map[string]bool{}
	return func(id string) (string, bool) {
		short := ShortComm(id)
		if seen[short] || len(seen) == MaxComms {
			return short, false
		}
		seen[short] = true
		return short, true
	}
}
