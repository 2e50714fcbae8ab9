package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-timer/xpu-timer/internal/version"
)

// newBuildInfo is xpu_timer_build_info: always 1, its labels say which build
// serves the metrics (node_exporter's node_exporter_build_info convention).
func newBuildInfo() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "xpu_timer_build_info",
		Help: "A metric with a constant '1' value labelled by version, revision and goversion from which xpu-timer was built.",
		ConstLabels: prometheus.Labels{
			"version":   version.Version,
			"revision":  version.Revision,
			"goversion": version.GoVersion(),
		},
	}, func() float64 { return 1 })
}
