package agent

import (
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/capture/look"
)

// The settings' stall watch gives the loop a look.Proc unless the command
// chose a Looker; off, the loop looks at nothing.
func TestSettingsStallWatch(t *testing.T) {
	lk := &fakeLooker{}
	for _, tc := range []struct {
		name string
		o    Options
		want Looker
	}{
		{"off", Options{}, nil},
		{"on", Options{Settings: Settings{StallWatch: true}}, &look.Proc{}},
		{"chosen", Options{Settings: Settings{StallWatch: true}, Looker: lk}, lk},
		{"chosen while off", Options{Looker: lk}, lk},
	} {
		tc.o.Tracer = &fakeTracer{}
		got := New(tc.o).o.Looker
		switch want := tc.want.(type) {
		case nil:
			if got != nil {
				t.Errorf("%s: looker %T, want none", tc.name, got)
			}
		case *look.Proc:
			if p, ok := got.(*look.Proc); !ok || p.Monotonic == nil {
				t.Errorf("%s: looker %T, want *look.Proc with a clock", tc.name, got)
			}
		default:
			if got != want {
				t.Errorf("%s: looker %T %p, want the chosen one", tc.name, got, got)
			}
		}
	}
}
