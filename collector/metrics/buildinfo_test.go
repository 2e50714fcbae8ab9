package metrics

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xpu-timer/xpu-timer/internal/version"
)

func TestBuildInfo(t *testing.T) {
	defer func(v, r string) { version.Version, version.Revision = v, r }(version.Version, version.Revision)
	version.Version, version.Revision = "v9.8.7", "abc123"
	x := New(testStatic) // the labels are read when the exporter is built
	want := `
# HELP xpu_timer_build_info A metric with a constant '1' value labelled by version, revision and goversion from which xpu-timer was built.
# TYPE xpu_timer_build_info gauge
xpu_timer_build_info{goversion="` + runtime.Version() + `",revision="abc123",version="v9.8.7"} 1
`
	if err := testutil.GatherAndCompare(x.Gatherer(), strings.NewReader(want), "xpu_timer_build_info"); err != nil {
		t.Fatal(err)
	}
}
